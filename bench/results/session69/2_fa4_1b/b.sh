#!/usr/bin/env bash
# Session 69, call b: FA4 at paper-1b's head dim (80), now padded to 96 (mhar.model.fa4), where
# FA4's own Hopper backward at 80 gave wrong gradients (session 63). In order, each result tarred
# into $OUT as it lands:
#   1. tests/core/test_fa4.py -k "gpu or padded": the real kernels against fp32 SDPA at 64, 96, 128 and 80 (padded);
#   2. one 1B layer's attention, cuDNN against FA4 (bench/attention_bench.py);
#   3. on an H200, the 1B baseline at the trainer's microbatch (32 x 1024, --batch global:
#      86 GB, more than an H100 holds): FA4, cuDNN, FA4 in one process;
#   4. the 1B baseline at the bench's microbatch (16 x 1024): cuDNN, FA4, cuDNN in one process.
# Needs d6d137b's tree: the padding was reverted at 97941f6.
# run: session 64's a.sh first (carry .whl/fa4a; FA4's site), then on the same warm machine
#   (carry .whl/fa4b): C=<commit> OUT=$OUT bash bench/results/session69/2_fa4_1b/b.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { rm -f $R/*.png; tar czf $OUT/r.tar.gz -C $OUT r; }
source "$(dirname "$0")/../../session63/fa4_site.sh" > $R/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/core/test_fa4.py -k "gpu or padded" > $R/test_fa4.log 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -3 $R/test_fa4.log; pack
timeout 100 python3 bench/attention_bench.py --presets paper-1b --backends auto,fa4 --out $R/attention_1b.json \
  > $R/attention_1b.log 2>&1
echo "attention rc=$? at ${SECONDS}s"; grep "^|" $R/attention_1b.log | tail -4; pack
FA=baseline+attention_kernel=fa4 CU=baseline
step() {  # $1 tag, $2 methods, then extra flags
  local tag=$1 methods=$2; shift 2
  timeout 200 python3 -m mhar bench step --preset paper-1b --methods $methods --steps 30 --warmup 3 \
    --out $R --tag $tag "$@" > $R/$tag.log 2>&1
  echo "$tag rc=$? at ${SECONDS}s"; grep -h "| paper" $R/step_$tag.md | grep -v "| >=\|| <=" | sort -u; pack
}
grep -q H200 $R/gpu.csv && step 1b_global $FA,$CU,$FA --batch global
step 1b_16x1024 $CU,$FA,$CU
