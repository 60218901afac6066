#!/usr/bin/env bash
# session 11 call 3: GPU tests of coef_dot; the whole step at 1280/73 with the COEF pass as products; the training step with the best
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 140 python3 -m pytest tests/routing/test_triton_cuda.py -k "coef_pass or one_program_per_query" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
P1='{"": null, "COEF as products": {"coef_dot": true}, "COEF as products, no prefetch": {"coef_dot": true, "dot_pf": false}, "COEF as products, 2 per SM": {"coef_dot": true, "coef_dot_progs_per_sm": 2}}'
timeout 170 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 "$P1" --out $R/ws1280.json > $R/ws1280.log 2>&1
grep "^| 1280/73/H8" $R/ws1280.log; pack
python3 - $R/ws1280.json "$P1" > $R/coef.json <<'PY'
import json, sys
rows = {r["schedule"]: r["kernel_ms"] for r in json.load(open(sys.argv[1]))["whole_step"]["1280/73/H8"]}
cfgs = {k: v for k, v in json.loads(sys.argv[2]).items() if k}
best = min(cfgs, key=lambda k: rows.get(f"two-phase S=8, {k}", 1e9))
print(json.dumps({"*": {**cfgs[best], "fwd_dot": True}} if rows.get(f"two-phase S=8, {best}", 1e9) < rows.get("two-phase S=8", 0) else {}))
PY
cat $R/coef.json
if [ "$(cat $R/coef.json)" != "{}" ]; then
  MHAR_ROUTING_CONFIG=$R/coef.json timeout 140 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 1b-coef > $R/step_1b-coef.log 2>&1
  grep -h "| paper" $R/step_1b-coef.md; pack
  MHAR_ROUTING_CONFIG=$R/coef.json timeout 80 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 350m-coef > $R/step_350m-coef.log 2>&1
  grep -h "| paper" $R/step_350m-coef.md; pack
fi
