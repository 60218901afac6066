#!/usr/bin/env bash
# Session 69, call b: 350M's baseline at the trainer's microbatch (`--batch global`, 32 x 1024)
# with FlashAttention-4's attention and with cuDNN's, alternating, in two processes (FA4, cuDNN,
# FA4, then cuDNN, FA4, cuDNN). Session 68 measured cuDNN at 49.7-49.8% MFU on one H200 (50%
# needs 222.2 ms) and FA4 0.2% faster on another whose clocks ran 3.5% lower.
# run: session 64's a.sh first (carry .whl/fa4a; FA4's site), then on the same warm machine
#   (carry .whl/fa4b): C=<commit> OUT=$OUT bash bench/results/session69/1_fa4_global/b.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
source "$(dirname "$0")/../../session63/fa4_site.sh" > $R/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
grep -q H200 $R/gpu.csv || exit 0
FA=baseline+attention_kernel=fa4 CU=baseline+attention_kernel=sdpa
run() {  # $1 tag, $2 methods
  timeout 240 python3 -m mhar bench step --preset paper-350m --batch global --methods $2 \
    --steps 30 --warmup 3 --out $R --tag $1 > $R/$1.log 2>&1
  echo "$1 rc=$? at ${SECONDS}s"; grep -h "| paper" $R/step_$1.md | grep -v "| >=\|| <=" | sort -u
  rm -f $R/*.png; tar czf $OUT/r.tar.gz -C $OUT r
}
run p1_fa4_first $FA,$CU,$FA
run p2_cudnn_first $CU,$FA,$CU
