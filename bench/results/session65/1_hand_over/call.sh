#!/usr/bin/env bash
# Session 65, call 1 (carry .whl/fa4a): session 64's staged hand-over call
# (session64/4_hand_over/call.sh: MHAR_CE_HAND_OVER's GPU tests, then the baseline with it off
# and on in alternating processes), after unpacking FA4's first half into /root/fa4site so that,
# if the card is an H200, session64/3_fa4_bars_sdpa_last/b.sh (carry .whl/fa4b) can follow on
# the same warm machine.
# run (carry .whl/fa4a): C=<commit> OUT=$OUT bash bench/results/session65/1_hand_over/call.sh
( source "$(dirname "$0")/../../session63/fa4_site.sh" ) > $OUT/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
bash "$(dirname "$0")/../../session64/4_hand_over/call.sh"
