#!/usr/bin/env bash
# Session 68, call 3b (run with METHODS=baseline,baseline+attention_kernel=sdpa): 350M at the
# trainer's microbatch (`--batch global`, 32 x 1024) with FlashAttention-4's attention in every
# method and the cuDNN baseline last in the same process. With cuDNN the baseline measured
# 49.7-49.8% MFU there (1_global_batch, three processes); FA4 took 0.7% off the 350M step at 16 x
# 1024 on an H200 (session 67). paper-1b is left out: at its head dim (80) FA4's Hopper backward
# gave wrong gradients (session 63).
# METHODS overrides the methods (default baseline,mhar,mhar-block,baseline+attention_kernel=sdpa).
# run: session 64's a.sh first (carry .whl/fa4a; FA4's site), then on the same warm machine
#   (carry .whl/fa4b): C=<commit> OUT=$OUT bash bench/results/session68/3_fa4_global/b.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
source "$(dirname "$0")/../../session63/fa4_site.sh" > $R/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
grep -q H200 $R/gpu.csv || exit 0
timeout 300 python3 -m mhar bench step --preset paper-350m --batch global \
  --methods ${METHODS:-baseline,mhar,mhar-block,baseline+attention_kernel=sdpa} \
  --steps 30 --warmup 3 --out $R --tag 350m_global_fa4 attention_kernel=fa4 > $R/step_350m.log 2>&1
echo "rc=$? at ${SECONDS}s"; grep -h "| paper" $R/step_350m_global_fa4.md | grep -v "| >=\|| <=" | sort -u
rm -f $R/*.png; tar czf $OUT/r.tar.gz -C $OUT r
