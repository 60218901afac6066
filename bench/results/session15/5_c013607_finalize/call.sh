#!/usr/bin/env bash
# session 15 call 5: finalize's Triton kernels (1c88e3c) against the eager ops before them (521904b's src/, copied to ab_old/old_src): GPU tests of finalize and the two-phase paths; the whole step at 1280/73 with 8 heads, old then new; the 1B training step (baseline, mhar) with the new code
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
PYTHONPATH=$PWD/src timeout 110 python3 -m pytest tests/routing/test_triton_cuda.py -k "finalize or rows or two_phase or fused_phase_two or sink" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
PYTHONPATH=$PWD/ab_old/old_src MHAR_COMMIT=521904b timeout 110 python3 bench/routing.py --step-only --shapes 1280/36 --heads 8 --out $R/ws1280_old.json > $R/ws1280_old.log 2>&1
grep -h "whole step" $R/ws1280_old.log; pack
PYTHONPATH=$PWD/src timeout 110 python3 bench/routing.py --step-only --shapes 1280/36 --heads 8 --out $R/ws1280_new.json > $R/ws1280_new.log 2>&1
grep -h "whole step" $R/ws1280_new.log; grep -h "finalize\|elementwise\|div\|mul" $R/ws1280_*.log | head -20; pack
PYTHONPATH=$PWD/src timeout 140 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/step_1b.png; pack
