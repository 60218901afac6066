#!/usr/bin/env bash
# Session 64, staged (not run: no device time left): MHAR_CE_HAND_OVER=1, the fused loss's
# backward scaling its gradients in place and skipping the scale where it is 1
# (src/mhar/model/loss.py, _hand_over; ce_kernel.scale_unless_one_). First its GPU tests (the
# kernel against torch, the fused loss, CUDA graphs, with it on), then the baseline's graphed
# step with it off and on in alternating processes (100M three pairs, 350M one), for time
# and peak memory. If it is faster and passes, its default may turn on.
# run: C=<commit> OUT=$OUT bash bench/results/session64/4_hand_over/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
pack() { tar czf $OUT/r.tar.gz -C $OUT r; }
MHAR_CE_HAND_OVER=1 OMP_NUM_THREADS=4 timeout 240 python3 -m pytest -q -p no:cacheprovider -rs \
  tests/core/test_fused_ce.py tests/train/test_cuda_graphs.py -k "cuda or graph" > $R/tests.log 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -3 $R/tests.log; pack
run() {  # $1 preset, $2 0|1, $3 tag
  MHAR_CE_HAND_OVER=$2 timeout 100 python3 -m mhar bench step --preset paper-$1 --methods baseline \
    --steps 30 --warmup 3 --out $R --tag $3 > $R/step_$3.log 2>&1
  echo "rc=$? $3 at ${SECONDS}s: $(grep -h '| paper' $R/step_$3.md | grep -v '| >=\|| <=' | head -1)"; rm -f $R/*.png; pack
}
for i in 1 2 3; do run 100m 0 100m_off$i; run 100m 1 100m_on$i; done
[ $SECONDS -lt 450 ] && { run 350m 0 350m_off; run 350m 1 350m_on; }
