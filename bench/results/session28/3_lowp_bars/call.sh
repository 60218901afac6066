#!/usr/bin/env bash
# session 28 call 3: the weights' bf16 copies written by the AdamW kernel (mhar.model.lowp;
# on by default with the kernel) with the one-pass CE and the tied embedding's gradient:
# the AdamW kernel's GPU tests, the 100M step (baseline and the routed methods, one
# process) and its baseline without the copies, the 350M step, then the CUDA-graph tests
# run: C=<commit> OUT=$OUT bash bench/results/session28/3_lowp_bars/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
FILES="tests/core/test_adamw_kernel.py" T_FILE=90 bash bench/gpu_tests.sh
step() {  # $1 tag, $2 limit s, the rest: bench step arguments
  local tag=$1 limit=$2; shift 2
  timeout $limit python3 -m mhar bench step --steps 30 --warmup 3 --out $R --tag $tag "$@" > $R/step_$tag.log 2>&1
  echo "$tag: rc $?"; grep -h "| paper" $R/step_$tag.md; rm -f $R/*.png; pack
}
step 100m 150 --preset paper-100m --methods baseline,attnres,mhar,mhar-block
step 100m_no_copies 80 --preset paper-100m --methods baseline --lowp-weights off
step 350m 210 --preset paper-350m --methods baseline,attnres,mhar
FILES="tests/train/test_cuda_graphs.py" T_FILE=100 bash bench/gpu_tests.sh
