#!/usr/bin/env bash
# Session 55, call 1: block routing's running sum formed in the later sublayers' output
# projection (stream.sum_in_product, addmm's C operand) against the separate add.
# 1. GPU tests: the new fused-against-separate test on CUDA (fp32, eager and compiled) and
#    the CUDA-graph replay tests (block routing one-pass, two-phase, mixed among them);
# 2. the 350M and 1B steps, processes alternating: each runs the baseline and mhar-block,
#    with the fused add (the default, "on") or stream.sum_in_product=false ("off"); 30 timed
#    steps, graphed.
# run: C=<commit> OUT=$OUT bash bench/results/session55/1_sum_in_product/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/core/test_streams.py -k sum_in_product \
  tests/train/test_cuda_graphs.py > $R/gpu_tests.log 2>&1; echo "gpu tests exit $? at ${SECONDS}s"; tail -2 $R/gpu_tests.log; pack
step() {  # preset tag limit [overrides]
  local p=$1 tag=$2 lim=$3; shift 3
  timeout $lim python3 -m mhar bench step --preset paper-$p --methods baseline,mhar-block \
    --steps 30 --warmup 3 --out $R --tag ${p}_$tag "$@" > $R/step_${p}_$tag.log 2>&1
  echo "rc=$? $p $tag at ${SECONDS}s"; grep -h "| paper" $R/step_${p}_$tag.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png; pack
}
step 350m on 100
step 350m off 100 stream.sum_in_product=false
step 1b on 140
step 1b off $((590 - SECONDS)) stream.sum_in_product=false
