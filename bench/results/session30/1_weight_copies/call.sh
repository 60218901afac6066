#!/usr/bin/env bash
# session 30 call 1: the bf16 weight copies (Decoder.attach_weight_copies, written by the
# Triton AdamW). GPU tests first (the kernel, the trainer with copies off and on, the
# fused loss, the graphs), then A/B steps, copies off and on in alternate processes:
# 100M baseline,mhar and 350M baseline. 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session30/1_weight_copies/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv > $R/gpu.csv 2>&1; cat $R/gpu.csv
tests() {  # $1 name, $2 limit s, $3 file, $4 -k expression
  timeout $2 python3 -m pytest $3 -v --tb=long -p no:cacheprovider -k "$4" > $R/tests_$1.log 2>&1
  echo "$1: rc $? $(grep -c ' PASSED' $R/tests_$1.log) passed, $(grep -c ' FAILED' $R/tests_$1.log) failed at $(( $(date +%s) - t0 )) s"
  pack
}
tests adamw 150 tests/core/test_adamw_kernel.py cuda
tests ce 60 tests/core/test_fused_ce.py cuda
tests graphs 150 tests/train/test_cuda_graphs.py ""
bench() {  # $1 tag, $2 preset, $3 methods, $4 copies on/off, $5 limit s
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    --weight-copies $4 > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
bench 100m_off_1 paper-100m baseline,mhar off 110
bench 100m_on_1 paper-100m baseline,mhar on 110
bench 350m_off_1 paper-350m baseline off 80
bench 350m_on_1 paper-350m baseline on 80
