#!/usr/bin/env bash
# session 11 call 2: fwd_dot with and without prefetch in the whole step at 1280/73; the training step with the faster one against the defaults
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 100 python3 -m pytest tests/routing/test_triton_cuda.py -k "products" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
P1='{"": null, "fwd as products": {"fwd_dot": true}, "fwd as products, prefetch": {"fwd_dot": true, "dot_pf": true}}'
timeout 150 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 "$P1" --out $R/ws1280.json > $R/ws1280.log 2>&1
grep "^| 1280/73/H8" $R/ws1280.log; pack
python3 - $R/ws1280.json > $R/dot.json <<'PY'
import json, sys
rows = {r["schedule"]: r["kernel_ms"] for r in json.load(open(sys.argv[1]))["whole_step"]["1280/73/H8"]}
pf = rows.get("two-phase S=8, fwd as products, prefetch", 1e9) < rows.get("two-phase S=8, fwd as products", 1e9)
print(json.dumps({"*": {"fwd_dot": True, "dot_pf": pf}}))
PY
cat $R/dot.json
part() {  # tag limit preset methods [config]
  MHAR_ROUTING_CONFIG=${5:-} timeout $2 python3 -m mhar bench step --preset $3 --methods $4 --steps 6 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md; pack
}
part 1b-dot 150 paper-1b baseline,mhar $R/dot.json
part 1b 130 paper-1b baseline,mhar
part 350m-dot 80 paper-350m baseline,mhar $R/dot.json
part 350m 70 paper-350m baseline,mhar
