#!/usr/bin/env bash
# session 20 call 1: phase 1's product kernels (_fwd_dot_kernel, _coef_dot_kernel) with
# one loop over each program's (token, block) pairs, pipelined by triton (tl.range
# num_stages), against HEAD's hand prefetch ("old", ab_old/src). "base": 3 stages, the
# transposed tiles loaded as such (TLOAD); "notload": the transposed tiles permuted in
# registers (only the pointer tables pipelined offline); "st5": 5 stages (two tiles
# ahead). Whole step's routing kernels, 8 heads; then the GPU tests of the product kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{}' > $R/base.cfg.json; echo '{}' > $R/old.cfg.json
echo '{"*": {"dot_tload": false}}' > $R/notload.cfg.json
echo '{"*": {"dot_stages": 5}}' > $R/st5.cfg.json
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2; [ -e $f.md ] && f=${f}_2
  src=$PWD/src; [ $2 = old ] && src=$PWD/ab_old/src
  PYTHONPATH=$src MHAR_ROUTING_CONFIG=$R/$2.cfg.json timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(grep -h '| two-phase' $f.md | cut -c1-300)"; pack
}
for v in old base notload st5 old base; do run 1280/36 $v; done
for v in old base; do run 1024/24 $v; done
PYTHONPATH=$PWD/src timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "as_products or one_head_per_program" > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
