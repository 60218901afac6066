#!/usr/bin/env bash
# session 10 call 3: the shipped defaults at all three sizes; adamw triton against torch
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
part() {  # tag limit preset methods adamw
  timeout $2 python3 -m mhar bench step --preset $3 --methods $4 --steps 6 --warmup 3 --adamw $5 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md; pack
}
part 100m-triton 110 paper-100m baseline,attnres,mhar,mhar@two-phase,mhar-block triton
part 350m-triton 200 paper-350m baseline,attnres,mhar,mhar-block triton
part 1b-triton 160 paper-1b baseline,mhar triton
part 350m-torch 60 paper-350m baseline torch
part 1b-torch 70 paper-1b baseline torch
