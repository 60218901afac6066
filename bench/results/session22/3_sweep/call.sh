#!/usr/bin/env bash
# session 22 call 3: the gather's tile with coefficients as parts (96 registers, five
# programs per SM): the routing benchmark's whole step at 1280/73 and 1024/49 with 8
# heads for the shipped config and each variant of $VARIANTS (a JSON object per name,
# applied to every width through MHAR_ROUTING_CONFIG's "*" and the (width, several
# heads) entries); then the CUDA-graph tests.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
python3 - "$R" <<'PY'
import json, sys
variants = {"stages2": {"gather_stages": 2}, "stages4": {"gather_stages": 4}, "warps8": {"gather_warps": 8},
            "cols64": {"gather_cols": 64}, "cols256": {"gather_cols": 256}, "sources32": {"gather_sources": 32}}
for name, cfg in variants.items():
    json.dump({"*": cfg, "1280,1": cfg, "1024,1": cfg}, open(f"{sys.argv[1]}/{name}.json", "w"))
PY
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2
  cfg=; [ $2 != shipped ] && cfg=$R/$2.json
  MHAR_ROUTING_CONFIG=$cfg timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(python3 -c "
import json; j=json.load(open('$f.json'))
for s, rows in j['whole_step'].items():
    for r in rows: print(round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:3]))")"; pack
}
for v in shipped stages2 stages4 warps8 cols64 cols256 sources32; do run 1280/36 $v; done
for v in shipped stages4 cols256; do run 1024/24 $v; done
timeout 100 python3 -m pytest tests/train/test_cuda_graphs.py -q -x > $R/tests_graphs.log 2>&1; tail -n 1 $R/tests_graphs.log; pack
