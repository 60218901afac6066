#!/usr/bin/env bash
# Session 62: every bar at one commit again, as session 59's call 2, only on an H200 (the bars'
# card): on any other card the call stops at once.
# run: C=<commit> OUT=$OUT bash bench/results/session62/2_bars/call.sh
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $name"
case "$name" in *H200*) ;; *) echo "not an H200: the bars are not measured"; exit 0;; esac
exec bash "$(dirname "$0")/../../session59/2_bars/call.sh"
