#!/usr/bin/env bash
# session 18 call 2: the COEF pass with a head per program (coef_split: 1 warp and 8
# programs per SM, or 2 warps and 4) and the upstream-gradient rows a token ahead
# (dot_pf_grads), each through MHAR_ROUTING_CONFIG against this commit's defaults, in the
# whole step's routing kernels at 1280/73 and 1024/49 with 8 heads; then the GPU tests of
# the product kernels, the split pass and the gradient sink
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{}' > $R/base.cfg.json
echo '{"*": {"dot_pf_grads": true}}' > $R/pg.cfg.json
echo '{"*": {"coef_split": true, "coef_split_warps": 1, "coef_split_progs_per_sm": 8}}' > $R/s1.cfg.json
echo '{"*": {"coef_split": true, "coef_split_warps": 2, "coef_split_progs_per_sm": 4}}' > $R/s2.cfg.json
echo '{"*": {"coef_split": true, "coef_split_warps": 1, "coef_split_progs_per_sm": 8, "dot_pf_grads": true}}' > $R/s1pg.cfg.json
for s in 1280/36 1024/24; do
  n=${s%/*}
  for v in base s1 s2 pg s1pg base; do
    f=$R/ws${n}_$v; [ -e $f.md ] && f=${f}_2
    MHAR_ROUTING_CONFIG=$R/$v.cfg.json timeout 80 python3 bench/routing.py --step-only --no-one-pass --shapes $s --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
    echo "$n $v $(grep -h '| two-phase' $f.md | cut -c1-230)"; pack
  done
done
timeout 230 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "as_products or one_head_per_program or sink" > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
