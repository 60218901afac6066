#!/usr/bin/env bash
# session 10 call 4: GPU tests of the final code; the two-phase chunk S swept in the whole step
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 230 python3 -m pytest tests/core/test_adamw_kernel.py tests/train/test_cuda_graphs.py tests/routing/test_triton_cuda.py \
  -k "cuda_kernel or partial or sink or two_phase or replay or trainer" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
for S in 6 12 16; do
  timeout 75 python3 bench/routing.py --step-only --shapes 1024/24,1280/36 --heads 1,8 --chunk $S --phase1 '{"": null}' \
    --out $R/ws_S$S.json > $R/ws_S$S.log 2>&1
  grep "==\|whole step H" $R/ws_S$S.log; pack
done
best=$(python3 - "$R" <<'PY'
import glob, json, sys
rows = {}
for f in glob.glob(sys.argv[1] + "/ws_S*.json"):
    for r in json.load(open(f))["whole_step"].get("1280/73/H8", []):
        if r["schedule"] != "one-pass":
            rows[int(r["schedule"].split("S=")[1].split(",")[0])] = r["kernel_ms"]
rows.setdefault(8, 118.55)  # run 2's default row (S = 8), same kernels
print(min(rows, key=rows.get))
PY
)
echo "best chunk at 1280/73/H8: $best"
if [ "$best" != 8 ]; then
  timeout 150 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 1b-S$best stream.chunk=$best > $R/step_1b.log 2>&1
  grep -h "| paper" $R/step_1b-S$best.md; pack
fi
