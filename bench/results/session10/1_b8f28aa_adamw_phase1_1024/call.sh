#!/usr/bin/env bash
# session 10 call 1: GPU tests, optimizer bench, adamw steps, phase-1 variants at 1024/24
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/gpu.txt 2>&1
timeout 150 python3 -m pytest tests/core/test_adamw_kernel.py tests/routing/test_triton_cuda.py -k "cuda_kernel or partial or sink or two_phase" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
timeout 80 python3 bench/optimizer_bench.py --presets paper-350m,paper-1b > $R/opt.log 2>&1; tail -n 24 $R/opt.log; pack
for impl in torch triton; do
  timeout 110 python3 -m mhar bench step --preset paper-350m --methods baseline --steps 8 --warmup 3 --adamw $impl --out $R --tag 350m-$impl > $R/step_$impl.log 2>&1
  grep -h "| paper" $R/step_350m-$impl.md; pack
done
timeout 210 python3 bench/routing.py --step-only --shapes 1024/24 --heads 1,8 --out $R/ws1024.json --write-phase1-config $R/picks1024.json > $R/ws1024.log 2>&1
grep "whole step H" $R/ws1024.log; pack
