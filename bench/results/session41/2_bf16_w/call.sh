#!/usr/bin/env bash
# session 41 call 2: the fused COEF pass with w rounded to bf16 in its gradient product
# ([a | r dz] by [g ; w_hi], coef_grads_w_lo false): half the right operand, so that at
# 1280 it takes 23,872 bytes of shared memory (offline, triton 3.6) and 8 programs fit an
# SM (29,504 with w's two parts: 7). One read at 1280 (17 / 41 / 65 sources) and 1024
# (9 / 25 / 41); the 1B step with the 1280 pick if its COEF pass is 8% under the two passes
# (pick.py), the 350M step with the 1024 pick if 3% under as built; each with the step as
# built in its own process.
# run: C=<commit> OUT=$OUT bash bench/results/session41/2_bf16_w/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session41/2_bf16_w
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 bench/phase1_call.py --direct-rows --d 1280 --n 17,41,65 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_1280.json > $R/sweep_1280.md 2>&1; grep "^|" $R/sweep_1280.md | grep -v -- "---"; pack
timeout 100 python3 bench/phase1_call.py --direct-rows --d 1024 --n 9,25,41 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_1024.json > $R/sweep_1024.md 2>&1; grep "^|" $R/sweep_1024.md | grep -v -- "---"; pack
step() {  # preset tag [config]
  timeout 170 env ${3:+MHAR_ROUTING_CONFIG=$3} python3 -m mhar bench step --preset $1 --methods baseline,mhar \
    --steps 30 --warmup 3 --out $R --tag $2 > $R/step_$2.log 2>&1
  grep -h "| paper" $R/step_$2.md | sort -u; rm -f $R/*.png; pack
}
if python3 $D/pick.py $R/sweep_1280.md $D/sweep_1280.json "1280,1" 0.92 $R/pick_1280.json; then
  cat $R/pick_1280.json; step paper-1b 1b_pick $R/pick_1280.json; step paper-1b 1b_built
fi
if python3 $D/pick.py $R/sweep_1024.md $D/sweep_1024.json "1024,1" 0.97 $R/pick_1024.json; then
  cat $R/pick_1024.json; step paper-350m 350m_pick $R/pick_1024.json; step paper-350m 350m_built
fi
