#!/usr/bin/env bash
# session 36 call 1: phase 1's gather and forward with several tokens at a time (config
# "gather_tokens" and "dot_tokens", the kernels' TOK): a read of few sources fills the
# products' 16 rows with several tokens' sources. GPU tests of them first; then one
# phase-1 read at 350M's shape (bench/phase1_call.py, d 1024, 8 heads, 6 queries) with 1, 4
# and 8 sources and both settings 1, 2, 4, 8; then the 350M step (baseline, mhar-block
# 'auto' and @two-phase), one process with both 1 (as before) and one as built (4).
# run: C=<commit> OUT=$OUT bash bench/results/session36/1_tokens/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
for t in 1 2 4 8; do echo "{\"*\": {\"gather_tokens\": $t, \"dot_tokens\": $t}}" > $R/tok$t.json; done
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "tokens_per_step or gradient_sink_block" > $R/tests.log 2>&1
tail -n 3 $R/tests.log; pack
for n in 1 4 8; do
  for t in 1 2 4 8; do
    MHAR_ROUTING_CONFIG=$R/tok$t.json timeout 60 python3 bench/phase1_call.py --d 1024 --n $n --queries 6 \
      --heads 8 --iters 20 > $R/phase1_n${n}_tok$t.log 2>&1
    echo "n=$n tok=$t $(grep -E "_bwd_gather|_fwd_dot" $R/phase1_n${n}_tok$t.log | tr -s ' ' | tr '\n' ' ' )"
  done
  pack
done
step() {  # tag, config
  MHAR_ROUTING_CONFIG=$2 timeout 200 python3 -m mhar bench step --preset paper-350m \
    --methods baseline,mhar-block,mhar-block@two-phase --steps 30 --warmup 3 --out $R --tag 350m_$1 \
    > $R/step_350m_$1.log 2>&1
  echo "350m $1"; grep -h "| paper" $R/step_350m_$1.md; rm -f $R/*.png; pack
}
step tok1 $R/tok1.json
step built ""
