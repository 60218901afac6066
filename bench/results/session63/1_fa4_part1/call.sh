#!/usr/bin/env bash
# Session 63, call 1: the first part of FlashAttention-4's libraries onto the machine. A call
# carries at most 64 MiB with the tree, and the CUTLASS DSL's compiler library alone is 50 MB
# compressed (193 MB as built), so it travels alone and waits in /root/fa4 for the next call
# on the same (warm) machine, which brings the rest (2_fa4_bench).
# run (carry .whl/fa4a, made as bench/results/session63/README.md says):
#   OUT=$OUT bash bench/results/session63/1_fa4_part1/call.sh
set -e
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader
mkdir -p /root/fa4
xz -dc -T0 .whl/fa4a/ir.so.xz > /root/fa4/ir.so
md5sum /root/fa4/ir.so  # 036a02f73836cf873728610c057dc079 as built
