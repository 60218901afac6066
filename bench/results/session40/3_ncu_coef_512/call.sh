#!/usr/bin/env bash
# session 40 call 3: (1) ncu (--set full) on phase 1's fused COEF pass (`_coef_dot_kernel`
# with GRAD, coef_grads) and its forward (`_fwd_dot_kernel`) at 1024, 41 sources, 8
# queries, 8 heads, as training reads (--direct-rows): what bounds the fused pass, which
# runs at about 57% of copy bandwidth (session 38); (2) the 100M step with 1024's phase-1
# settings at 512 (p1_512.json: the forward a head per program capped at 160 registers,
# 12 per SM, 2 stages; call 1 measured that read's forward 20% faster) against as built,
# two processes each, alternating.
# run: C=<commit> OUT=$OUT bash bench/results/session40/3_ncu_coef_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session40/3_ncu_coef_512
timeout 200 ncu --clock-control none --set full --import-source no -k 'regex:_coef_dot|_fwd_dot' --launch-count 2 \
  python3 bench/phase1_call.py --direct-rows --d 1024 --n 41 --queries 8 --heads 8 --iters 1 > $R/ncu_1024_41.txt 2>&1
grep -E "^  _|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Local" $R/ncu_1024_41.txt | head -60; pack
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md | sort -u; tail -n 2 $R/step_$1_$2.log | cut -c1-300; rm -f $R/*.png; pack
}
step 100m p1_a $D/p1_512.json baseline,mhar 90
step 100m built_a "" baseline,mhar 90
step 100m p1_b $D/p1_512.json baseline,mhar 90
step 100m built_b "" baseline,mhar 90
