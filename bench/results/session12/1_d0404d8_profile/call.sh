#!/usr/bin/env bash
# session 12 call 1: CUDA tests of the product kernels (refactors since they last ran); 100M mhar one-pass vs two-phase; profile of the graphed 1B step (baseline, mhar)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
timeout 120 python3 -m pytest tests/routing/test_triton_cuda.py -k "products or one_program" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
timeout 150 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar,mhar@two-phase --steps 6 --warmup 3 --out $R --tag 100m > $R/step_100m.log 2>&1
grep -h "| paper" $R/step_100m.md; pack
timeout 270 python3 bench/profile_step.py --preset paper-1b --methods baseline,mhar --out $R > $R/profile_1b.log 2>&1
tail -n 14 $R/profile_1b.log; pack
