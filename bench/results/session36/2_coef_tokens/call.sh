#!/usr/bin/env bash
# session 36 call 2: phase 1's COEF pass with a head per program takes several tokens at a
# time too (config "dot_tokens", with the forward's). GPU tests of the three kernels with
# it (call 1's were cut at 150 s); one phase-1 read at 350M's shape with 1, 4 and 8 sources,
# the three kernels at 1 token (as before) and as built (4); the 350M step, one process
# each (baseline, mhar-block, mhar-block@two-phase; mhar too as built).
# run: C=<commit> OUT=$OUT bash bench/results/session36/2_coef_tokens/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
echo '{"*": {"gather_tokens": 1, "dot_tokens": 1}}' > $R/tok1.json
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "tokens_per_step or gradient_sink_block or one_head_per_program" > $R/tests.log 2>&1
tail -n 3 $R/tests.log; pack
for n in 1 4 8; do
  for t in 1 4; do
    cfg=$([ $t = 1 ] && echo $R/tok1.json || echo "")
    MHAR_ROUTING_CONFIG=$cfg timeout 40 python3 bench/phase1_call.py --d 1024 --n $n --queries 6 \
      --heads 8 --iters 20 > $R/phase1_n${n}_tok$t.log 2>&1
    echo "n=$n tok=$t $(grep -E "_bwd_gather|_fwd_dot|_coef_dot" $R/phase1_n${n}_tok$t.log | tr -s ' ' | tr '\n' ' ')"
  done
  pack
done
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md; rm -f $R/*.png; pack
}
step 350m tok1 $R/tok1.json baseline,mhar-block,mhar-block@two-phase 110
step 350m built "" baseline,mhar-block,mhar-block@two-phase,mhar 130
