#!/usr/bin/env bash
# session 42 call 2: where the 350M MHAR step's extra time goes at the current code (the
# last profile was session 38's, before the fused pass took w in bf16), and what bounds
# phase 2's one-query kernels: ncu on three launches each of `_fwd_kernel` and
# `_bwd_kernel` (adding into the sink's running sums) in the whole step's routing at
# 1024/49 with 8 heads (bench/routing.py --step-only; launches 4-6 of each kind, so
# phase 2 reads of several in-chunk sources); last, the mhar step eagerly by kernel and
# launcher (the host ops behind the small kernels).
# run: C=<commit> OUT=$OUT bash bench/results/session42/2_profile_phase2/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 220 python3 bench/profile_step.py --preset paper-350m --methods baseline,mhar \
  --out $R > $R/profile_350m.log 2>&1
tail -n 24 $R/profile_350m.log | cut -c1-160; pack
SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
for k in _fwd_kernel _bwd_kernel; do
  timeout 120 ncu --clock-control none $SEC -k "regex:^${k}\$" --launch-skip 3 --launch-count 3 \
    python3 bench/routing.py --step-only --shapes 1024/24 --heads 8 --no-one-pass --no-peers \
    --out $R/ncu_step.json > $R/ncu$k.txt 2>&1
  grep -E "^  _|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issue Slots Busy|Warp Cycles Per Issued|Grid Size|Waves Per SM|One or More Eligible|No Eligible" $R/ncu$k.txt | head -60; pack
done
timeout 150 python3 bench/profile_step.py --preset paper-350m --methods mhar --eager --out $R > $R/profile_350m_eager.log 2>&1
tail -n 5 $R/profile_350m_eager.log | cut -c1-160; pack
