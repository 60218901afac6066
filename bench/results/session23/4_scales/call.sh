#!/usr/bin/env bash
# session 23 call 4: one head's lane-group programs reading the key-norm scales and taking
# their outputs as products of the tiles as loaded (op's "dot_group_scales", new) against
# summing squares with a second, transposed read; 3 pipeline stages against the 2 now
# shipped for one head; whole step at 1280/73 and 1024/49 with one head, then 8 heads at
# 1280/73 (unchanged code path, SCALES now passed with SPLIT); then the GPU tests of the
# lane groups, the split kernels and the gradient sink.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
show() {
  python3 -c "
import json; j=json.load(open('$1'))
for s, rows in j['whole_step'].items():
    for r in rows: print(s, r['schedule'], round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:16]} {k['ms']}\" for k in r['top'][:5]))"
}
V='{"": null, "sums of squares": {"dot_group_scales": false}, "3 stages": {"dot_stages": 3}}'
for sh in 1280/36 1024/24; do
  n=${sh%/*}; f=$R/ws${n}_h1
  timeout 150 python3 bench/routing.py --step-only --no-one-pass --shapes $sh --heads 1 --chunk 8 --phase1 "$V" --out $f.json > $f.log 2>&1
  show $f.json; pack
done
f=$R/ws1280_h8
timeout 60 python3 bench/routing.py --step-only --no-one-pass --shapes 1280/36 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
show $f.json; pack
timeout 300 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "lane_groups or one_head_per_program or gradient_sink" > $R/tests_routing.log 2>&1; tail -n 1 $R/tests_routing.log; pack
