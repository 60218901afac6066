#!/usr/bin/env bash
# session 42 call 1: the fused COEF pass at 1024 (350M) with more programs per SM. It takes
# 238 registers uncapped (8 one-warp programs per SM: 169-255 registers allow 2 warps per
# scheduler). Capped at 168, 11 fit with 2 stages (19,264-19,776 bytes of shared memory)
# and 12 with 1 stage (8,192); offline spills (triton 3.6): 2 stages 216 / 120 / 80 bytes
# at 64 / 32 / 16 lanes, 1 stage 264 / 128 / 120, and at a cap of 128 (16 per SM) 304.
# One read (9 / 25 / 41 sources), then the 350M step with the pick if its pass is at most
# 0.97 of as built at 25 and 41 sources: pick, as built, pick, one process each. Between
# them, the GPU tests of the fused pass (the capped settings included).
# (the call ran a copy of session 41's pick.py beside this script, since removed: the same code)
# run: C=<commit> OUT=$OUT bash bench/results/session42/1_fused_cap/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session42/1_fused_cap
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 bench/phase1_call.py --direct-rows --d 1024 --n 9,25,41 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_1024.json > $R/sweep_1024.md 2>&1; grep "^|" $R/sweep_1024.md | grep -v -- "---"; pack
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py -k "test_coef_grads" \
  > $R/tests.log 2>&1; tail -3 $R/tests.log; pack
step() {  # preset tag [config]
  timeout 150 env ${3:+MHAR_ROUTING_CONFIG=$3} python3 -m mhar bench step --preset $1 --methods baseline,mhar \
    --steps 30 --warmup 3 --out $R --tag $2 > $R/step_$2.log 2>&1
  grep -h "| paper" $R/step_$2.md | sort -u; rm -f $R/*.png; pack
}
if python3 bench/results/session41/2_bf16_w/pick.py $R/sweep_1024.md $D/sweep_1024.json "1024,1" 0.97 $R/pick_1024.json; then
  cat $R/pick_1024.json; step paper-350m 350m_pick1 $R/pick_1024.json; step paper-350m 350m_built
  step paper-350m 350m_pick2 $R/pick_1024.json
fi
