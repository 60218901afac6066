#!/usr/bin/env bash
# Session 53, call 3: the 512 config from call 2 (the fused COEF pass 12 per SM, 32-lane
# pieces, capped at 168) as built. 1. the GPU tests of the fused pass at 512 and of the
# whole-wave sizing; 2. mhar
# against the previous 512 entry (8 per SM, 64 lanes, uncapped) in alternating processes.
# run: C=<commit> OUT=$OUT bash bench/results/session53/3_check_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -s tests/routing/test_triton_cuda.py -k "test_coef_grads and 512 or whole_waves" \
  -p no:cacheprovider > $R/gpu_tests.log 2>&1; echo "gpu tests exit $?"; tail -2 $R/gpu_tests.log; pack
echo '{"512,1": {"coef_grads_progs_per_sm": null, "coef_grads_maxnreg": null, "coef_grads_lanes": 64}}' > $R/before.json
step() {  # tag methods [config]
  timeout 150 env ${3:+MHAR_ROUTING_CONFIG=$3} python3 -m mhar bench step --preset paper-100m \
    --methods $2 --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png; pack
}
step 100m_before1 baseline,mhar $R/before.json
step 100m_built1 baseline,mhar
step 100m_before2 baseline,mhar $R/before.json
step 100m_built2 baseline,mhar
