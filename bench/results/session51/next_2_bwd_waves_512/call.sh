#!/usr/bin/env bash
# Session 51, staged for a later session with a GPU (not run: no device was lent in
# session 51). Phase 2's backward into running sums asks for 16 programs an SM. Offline
# (../offline/residency_triton*.md) it compiles at 512 with 8 heads to 240 registers on
# triton 3.6 (8 held: two whole waves) but to 168 on triton 3.9 (12 held: a partial last
# wave, 16 = 12 + 4). Asking for 24 gives whole waves on both (3 and 2). This call checks
# that 24 costs nothing on the GPU's triton 3.6: the 100M step, baseline and mhar, with
# bwd24.json against as built in alternating processes (24, built, 24, built). If it is
# level, 24 can become the 512 entry's setting, and test_kernel_layouts' KNOWN_PARTIAL
# entry goes away.
# run: C=<commit> OUT=$OUT bash bench/results/session51/next_2_bwd_waves_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session51/next_2_bwd_waves_512
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag [config]
  timeout 130 env ${2:+MHAR_ROUTING_CONFIG=$2} python3 -m mhar bench step --preset paper-100m \
    --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_bwd24_1 $D/bwd24.json; step 100m_built_1; step 100m_bwd24_2 $D/bwd24.json; step 100m_built_2
