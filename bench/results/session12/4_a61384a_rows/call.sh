#!/usr/bin/env bash
# session 12 call 4: the whole step at 1280/73 with and without the direct phase-1 rows (after the leak fix); GPU tests (routing rows, sinks, graphed steps); the 1B training step (baseline, mhar, mhar-block one-pass and two-phase), then baseline and mhar with the rows stacked by autograd
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
P1='{"": null, "rows stacked by autograd": {"direct_rows": false}}'
timeout 100 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 "$P1" --out $R/ws1280.json > $R/ws1280.log 2>&1
grep "^| 1280/73" $R/ws1280.log; pack
timeout 130 python3 -m pytest tests/routing/test_triton_cuda.py tests/train/test_cuda_graphs.py -k "rows or sink or fused_phase_two or two_phase or replay" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
timeout 230 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar,mhar-block,mhar-block@two-phase --steps 6 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; pack
echo '{"*": {"direct_rows": false}}' > $R/stacked.json
MHAR_ROUTING_CONFIG=$R/stacked.json timeout 110 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 1b-stacked > $R/step_1b-stacked.log 2>&1
grep -h "| paper" $R/step_1b-stacked.md; pack
