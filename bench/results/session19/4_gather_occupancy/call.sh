#!/usr/bin/env bash
# session 19 call 4: the gather's occupancy at this commit (its sources as products,
# uncapped at 1280 with 8 heads: 146 registers, 3 programs per SM): capped at 128 (4 per
# SM, no spills offline; "cap128"), chunks of 64 columns ("c64": 88 registers) and those
# capped at 80 ("c64cap80": 6 per SM, no spills offline); at 1024/49 chunks of 64; with
# one head at 1280 its cap of 96 from the kernel before against none ("h1nocap"). Whole
# step's routing kernels (8 heads unless "h1").
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{}' > $R/base.cfg.json
echo '{"1280,1": {"gather_maxnreg": 128}}' > $R/cap128.cfg.json
echo '{"*": {"gather_cols": 64}}' > $R/c64.cfg.json
echo '{"*": {"gather_cols": 64}, "1280,1": {"gather_maxnreg": 80}}' > $R/c64cap80.cfg.json
echo '{}' > $R/h1.cfg.json
echo '{"1280,0": {"gather_maxnreg": null}}' > $R/h1nocap.cfg.json
run() {  # shape variant heads
  n=${1%/*}; f=$R/ws${n}_$2; [ -e $f.md ] && f=${f}_2
  MHAR_ROUTING_CONFIG=$R/$2.cfg.json timeout 80 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads $3 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(grep -h '| two-phase' $f.md | cut -c1-200)"; pack
}
for v in base cap128 c64 c64cap80 base; do run 1280/36 $v 8; done
for v in base c64 base; do run 1024/24 $v 8; done
for v in h1 h1nocap h1; do run 1280/36 $v 1; done
