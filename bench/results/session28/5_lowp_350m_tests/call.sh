#!/usr/bin/env bash
# session 28 call 5: the weights' bf16 copies at 350M, on and off, one process each (at
# 100M they measured 32.3 against 32.4 ms in call 3), then the GPU tests of activation
# checkpointing and of the bench step (the linear layers and the trainer changed)
# run: C=<commit> OUT=$OUT bash bench/results/session28/5_lowp_350m_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
step() {  # $1 tag, $2 limit s, the rest: bench step arguments
  local tag=$1 limit=$2; shift 2
  timeout $limit python3 -m mhar bench step --steps 30 --warmup 3 --out $R --tag $tag "$@" > $R/step_$tag.log 2>&1
  echo "$tag: rc $?"; grep -h "| paper" $R/step_$tag.md; rm -f $R/*.png; pack
}
step 350m_copies 100 --preset paper-350m --methods baseline --lowp-weights on
step 350m_no_copies 100 --preset paper-350m --methods baseline --lowp-weights off
FILES="tests/train/test_bench_step.py tests/train/test_activation_checkpointing.py" T_FILE=170 bash bench/gpu_tests.sh
