#!/usr/bin/env bash
# session 14 call 1: ncu on the phase-1 kernels at 1280, 41 sources, S 8, 8 heads; per-kernel times of one phase-1 read; the 1024 multi-head tile entry with 1 and 2 backward warps (per call, whole step); GPU tests of the two-phase paths with the gather capped at 96 registers
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/gpu.txt 2>&1
for H in 8 1; do timeout 60 python3 bench/phase1_call.py --heads $H > $R/p1_h$H.txt 2>&1; head -8 $R/p1_h$H.txt; done; pack
timeout 150 ncu --clock-control none --set full --import-source no -k 'regex:_fwd_dot|_coef_dot|_bwd_gather|_bwd_kernel|_fwd_kernel' --launch-count 5 python3 bench/phase1_call.py --heads 8 --iters 1 > $R/ncu_h8.txt 2>&1
grep -E "^  _|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Shared Memory Configuration Size|Dynamic Shared|Static Shared" $R/ncu_h8.txt | head -60; pack
V='{"bwd 2 warps": {"bwd_warps": 2}}'
timeout 70 python3 bench/routing.py --shapes 1024/24 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --variants --variant-configs "$V" --out $R/call1024.json > $R/call1024.log 2>&1
grep "^| 1024" $R/call1024.md; pack
timeout 70 python3 bench/routing.py --step-only --shapes 1024/24 --heads 8 --phase1 '{"": null, "bwd 2 warps": {"bwd_warps": 2}}' --out $R/ws1024.json > $R/ws1024.log 2>&1
grep -h "whole step" $R/ws1024.log; pack
timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -k "partial or two_phase or products or sink or rows or deterministic" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
