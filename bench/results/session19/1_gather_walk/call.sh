#!/usr/bin/env bash
# session 19 call 1: phase 1's gather walking each row in chunks of 128 columns whatever
# the heads (a chunk meeting two heads takes a product per head) against the session's
# starting commit (ab_old/src, chunks by head part: 8 of 128 and 8 of 32 at 1280/8), in the
# whole step's routing kernels at 1280/73 and 1024/49 with 8 heads, twice each; the new
# gather uncapped at 1280 ("nocap"); the GPU tests that run phase 1's gather
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{"1280,1": {"gather_maxnreg": null}}' > $R/nocap.cfg.json
for s in 1280/36 1024/24; do
  n=${s%/*}
  vs="old new old new"; [ $n = 1280 ] && vs="old new nocap old new"
  for v in $vs; do
    src=$PWD/src; [ $v = old ] && src=$PWD/ab_old/src
    cfg=; [ $v = nocap ] && cfg=$R/nocap.cfg.json
    f=$R/ws${n}_$v; [ -e $f.md ] && f=${f}_2
    MHAR_ROUTING_CONFIG=$cfg PYTHONPATH=$src timeout 80 python3 bench/routing.py --step-only --no-one-pass --shapes $s --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
    echo "$n $v $(grep -h '| two-phase' $f.md | cut -c1-200)"; pack
  done
done
export PYTHONPATH=$PWD/src
timeout 300 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "partial or two_phase or phase_one_rows or sink" > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
