#!/usr/bin/env bash
# Session 62: every file with GPU tests at one commit, after sessions 60-61's trainer changes
# (the multi-process trainer's compiled regions, Triton AdamW and graphed DDP; `fit`'s
# queued-ahead step). bench/gpu_tests.sh is now session 59's sharded runner with every file
# that has GPU tests (session 59 ran ten of them).
# run: C=<commit> OUT=$OUT bash bench/results/session62/1_gpu_tests/call.sh
exec bash bench/gpu_tests.sh
