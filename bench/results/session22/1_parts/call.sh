#!/usr/bin/env bash
# session 22 call 1: coef_parts (the COEF pass's coefficients stored as bf16 parts, the
# gather taking them as product operands) against the shipped default: the routing
# benchmark's whole step at 1280/73 and 1024/49 with 8 heads (at 1280 also with the
# gather's register cap at 96 and uncapped), then the 1B step: baseline and MHAR with
# coef_parts in one process, MHAR with the default in the next.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{"*": {"coef_parts": true}}' > $R/parts.json
echo '{"*": {"coef_parts": true}, "1280,1": {"gather_maxnreg": 96}}' > $R/parts96.json
echo '{"*": {"coef_parts": true}, "1280,1": {"gather_maxnreg": null}}' > $R/partsnone.json
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2
  cfg=; [ $2 != default ] && cfg=$R/$2.json
  MHAR_ROUTING_CONFIG=$cfg timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(python3 -c "
import json; j=json.load(open('$f.json'))
for s, rows in j['whole_step'].items():
    for r in rows: print(round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:5]))")"; pack
}
for v in default parts parts96 partsnone; do run 1280/36 $v; done
for v in default parts; do run 1024/24 $v; done
MHAR_ROUTING_CONFIG=$R/parts.json timeout 170 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag 1b_parts > $R/step_1b_parts.log 2>&1
grep -h "| paper" $R/step_1b_parts.md; rm -f $R/*.png; pack
timeout 110 python3 -m mhar bench step --preset paper-1b --methods mhar --steps 30 --warmup 3 --out $R --tag 1b_default > $R/step_1b_default.log 2>&1
grep -h "| paper" $R/step_1b_default.md; rm -f $R/*.png; pack
