#!/usr/bin/env bash
# session 20 call 3: phase 1's pipelined product kernels with their pointer tables read
# by inline PTX, which triton's pipeliner does not see, so that the tiles are the loop's
# first loads and are copied two blocks ahead in three stages, not one ("tasm"; offline
# the COEF pass then needs 28.4 KB of shared memory, seven programs per SM); the COEF
# pass's gradient rows loaded every block so that they are copied ahead too ("gpf"),
# and both. Whole step's routing kernels, 8 heads.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{}' > $R/base.cfg.json
echo '{"*": {"dot_table_asm": true, "coef_split_progs_per_sm": 7}}' > $R/tasm.cfg.json
echo '{"*": {"coef_grads_ahead": true}}' > $R/gpf.cfg.json
echo '{"*": {"dot_table_asm": true, "coef_grads_ahead": true, "coef_split_progs_per_sm": 7}}' > $R/tasm_gpf.cfg.json
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2; [ -e $f.md ] && f=${f}_2
  MHAR_ROUTING_CONFIG=$R/$2.cfg.json timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(python3 -c "
import json; j=json.load(open('$f.json'))
for s, rows in j['whole_step'].items():
    for r in rows: print(round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:5]))")"; pack
}
for v in base tasm gpf tasm_gpf base; do run 1280/36 $v; done
for v in base tasm_gpf; do run 1024/24 $v; done
