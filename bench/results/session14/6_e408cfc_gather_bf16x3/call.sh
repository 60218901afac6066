#!/usr/bin/env bash
# session 14 call 6: the whole step at 1280/73 and 1024/49 with the gather's products as three bf16 products (gather_precision bf16x3) against tf32x3 (the default); the GPU cases of that gather
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$NEW
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for s in 1280/36 1024/24; do
  timeout 100 python3 bench/routing.py --step-only --shapes $s --phase1 '{"": null, "gather bf16x3": {"gather_precision": "bf16x3"}}' --out $R/ws${s%/*}.json > $R/ws${s%/*}.log 2>&1
  grep -h "two-phase" $R/ws${s%/*}.md; pack
done
timeout 90 python3 -m pytest tests/routing/test_triton_cuda.py -k "bf16x3" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
