#!/usr/bin/env bash
# session 41 call 1: the fused COEF pass at 1280 (1B) with fewer programs per SM. Offline on
# triton 3.6 it takes 29,504-29,696 bytes of shared memory a program, so 8 per SM
# (8 x 30.5 KB with the 1 KB each reserves) do not fit the SM's 228 KB: 7 are resident and
# the eighth runs as a second wave, which would explain session 38's 1.5-1.7x. One read
# (--direct-rows) at 17 / 41 / 65 sources (sweep.json); if a variant's routing kernels are
# 3% faster than the two passes (pick.py), the 1B step with it and as built.
# run: C=<commit> OUT=$OUT bash bench/results/session41/1_fused_1280/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session41/1_fused_1280
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 bench/phase1_call.py --direct-rows --d 1280 --n 17,41,65 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep.json > $R/sweep_1280.md 2>&1; grep "^|" $R/sweep_1280.md | grep -v -- "---"; pack
python3 $D/pick.py $R/sweep_1280.md $D/sweep.json $R/pick.json || exit 0
cat $R/pick.json
for run in pick built; do
  cfg=""; [ $run = pick ] && cfg=$R/pick.json
  timeout 150 env ${cfg:+MHAR_ROUTING_CONFIG=$cfg} python3 -m mhar bench step --preset paper-1b --methods baseline,mhar \
    --steps 30 --warmup 3 --out $R --tag 1b_$run > $R/step_1b_$run.log 2>&1
  grep -h "| paper" $R/step_1b_$run.md | sort -u; rm -f $R/*.png; pack
done
