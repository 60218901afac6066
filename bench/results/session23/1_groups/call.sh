#!/usr/bin/env bash
# session 23 call 1: one head (attnres) as eight lane groups in phase 1's product kernels
# (op's "dot_lane_groups", new) against the per-query kernels it took before (groups 0),
# and sixteen groups: the routing benchmark's whole step at 1280/73 and 1024/49 with one
# head, chunks of 8, every row in one process; 8 heads once as a check that they are
# unchanged; then the GPU routing tests of the phase-1 paths.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
show() {
  python3 -c "
import json; j=json.load(open('$1'))
for s, rows in j['whole_step'].items():
    for r in rows: print(s, r['schedule'], round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:6]))"
}
V='{"": null, "groups 0 (per-query)": {"dot_lane_groups": 0}, "groups 16": {"dot_lane_groups": 16}}'
for sh in 1280/36 1024/24; do
  n=${sh%/*}; f=$R/ws${n}_h1
  timeout 150 python3 bench/routing.py --step-only --no-one-pass --shapes $sh --heads 1 --chunk 8 --phase1 "$V" --out $f.json > $f.log 2>&1
  show $f.json; pack
done
f=$R/ws1280_h8
timeout 60 python3 bench/routing.py --step-only --no-one-pass --shapes 1280/36 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
show $f.json; pack
timeout 240 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "lane_groups or as_products or two_phase or phase_one_rows or gradient_sink or finalize or deterministic" > $R/tests_routing.log 2>&1; tail -n 1 $R/tests_routing.log; pack
