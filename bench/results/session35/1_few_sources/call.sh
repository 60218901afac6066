#!/usr/bin/env bash
# session 35 call 1: phase 1 over few sources per element (config "few_sources",
# _fwd_few_kernel / _coef_few_kernel / _gather_few_kernel) against the product kernels,
# which pad a token's sources to 16 rows. GPU tests first; then one phase-1 read at 350M's
# shape (bench/phase1_call.py, d 1024, 8 heads, 6 queries, 16384 tokens) with 1, 4 and 8
# sources, few kernels on (as built) and off ({"*": {"few_sources": 0}}); then the 350M
# step, baseline, mhar-block (one-pass) and mhar-block@two-phase, few on, one process.
# run: C=<commit> OUT=$OUT bash bench/results/session35/1_few_sources/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
echo '{"*": {"few_sources": 0}}' > $R/off.json
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py > $R/tests.log 2>&1
tail -n 3 $R/tests.log; pack
for n in 1 4 8; do
  for mode in on off; do
    cfg=$([ $mode = off ] && echo $R/off.json || echo "")
    MHAR_ROUTING_CONFIG=$cfg timeout 60 python3 bench/phase1_call.py --d 1024 --n $n --queries 6 --heads 8 \
      --iters 20 > $R/phase1_n${n}_$mode.log 2>&1
    echo "n=$n few=$mode"; grep -E "few|dot|gather|key_scales|route" $R/phase1_n${n}_$mode.log | head -8
  done
  pack
done
timeout 200 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar-block,mhar-block@two-phase \
  --steps 30 --warmup 3 --out $R --tag 350m_few > $R/step_350m_few.log 2>&1
grep -h "| paper" $R/step_350m_few.md; rm -f $R/*.png; pack
