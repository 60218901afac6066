#!/usr/bin/env bash
# session 10 call 5: every method at 1B in one run, and hyper at 350M, at the final defaults
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
part() {  # tag limit preset methods
  timeout $2 python3 -m mhar bench step --preset $3 --methods $4 --steps 6 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md; pack
}
part 1b 250 paper-1b baseline,attnres,mhar,mhar-block,hyper
part 350m 110 paper-350m baseline,hyper
