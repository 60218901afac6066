#!/usr/bin/env bash
# session 12 call 2: GPU tests of the fused gather and the per-query kernels; the whole step at 1280/73 and 1024/49 with the gather fused into the COEF pass; the training step with the fastest
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 150 python3 -m pytest tests/routing/test_triton_cuda.py -k "with_gather or one_program" -q -p no:cacheprovider -x > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
P1='{"": null, "gather in the COEF pass": {"coef_gather": true}, "gather in the COEF pass, chunks of 16": {"coef_gather": true, "coef_gather_cols": 16}}'
timeout 130 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 "$P1" --out $R/ws1280.json > $R/ws1280.log 2>&1
grep "^| 1280/73/H8" $R/ws1280.log; pack
python3 - $R/ws1280.json "$P1" > $R/gather.json <<'PY'
import json, sys
rows = {r["schedule"]: r["kernel_ms"] for r in json.load(open(sys.argv[1]))["whole_step"]["1280/73/H8"]}
cfgs = {k: v for k, v in json.loads(sys.argv[2]).items() if k}
best = min(cfgs, key=lambda k: rows.get(f"two-phase S=8, {k}", 1e9))
print(json.dumps({"*": cfgs[best]} if rows.get(f"two-phase S=8, {best}", 1e9) < rows.get("two-phase S=8", 0) else {}))
PY
cat $R/gather.json
if [ "$(cat $R/gather.json)" != "{}" ]; then
  MHAR_ROUTING_CONFIG=$R/gather.json timeout 150 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 1b-gather > $R/step_1b-gather.log 2>&1
  grep -h "| paper" $R/step_1b-gather.md; pack
  P2="{\"\": null, \"fused\": $(python3 -c "import json;print(json.dumps(json.load(open('$R/gather.json'))['*']))")}"
  timeout 60 python3 bench/routing.py --step-only --shapes 1024/24 --phase1 "$P2" --out $R/ws1024.json > $R/ws1024.log 2>&1
  grep "^| 1024/49/H8" $R/ws1024.log; pack
fi
