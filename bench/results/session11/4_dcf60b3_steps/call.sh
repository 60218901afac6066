#!/usr/bin/env bash
# session 11 call 4: GPU tests with the products as defaults; the whole step at 1024/49; the training step at 1B and 350M (baseline, attnres, mhar, mhar-block)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 170 python3 -m pytest tests/routing/test_triton_cuda.py -k "products or one_program or partial or two_phase or sink or deterministic" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
timeout 60 python3 bench/routing.py --step-only --shapes 1024/24 --phase1 '{"": null}' --out $R/ws1024.json > $R/ws1024.log 2>&1
grep "^| 1024/49" $R/ws1024.log; pack
part() {  # tag limit preset methods
  timeout $2 python3 -m mhar bench step --preset $3 --methods $4 --steps 6 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md; pack
}
part 1b 190 paper-1b baseline,attnres,mhar,mhar-block
part 350m 110 paper-350m baseline,attnres,mhar,mhar-block
