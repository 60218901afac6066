#!/usr/bin/env bash
# session 30 call 3: the weight copies with (a) the layers' weight gradients written in
# fp32 by their products (layers.FP32_WEIGHT_GRAD: no bf16 -> fp32 cast kernel) and (b)
# the AdamW kernel's copy written through the hardware's bf16 conversion on the GPU.
# GPU tests of both; bench/optimizer_bench.py (the Triton step with copies, both
# roundings); the 100M baseline's profile with copies; A/B steps, copies off and on in
# alternate processes: 100M baseline and 1B baseline,mhar.
# run: C=<commit> OUT=$OUT bash bench/results/session30/3_fp32_grads/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
tests() {  # $1 name, $2 limit s, $3 file, $4 -k expression
  timeout $2 python3 -m pytest $3 -v --tb=long -p no:cacheprovider -k "$4" > $R/tests_$1.log 2>&1
  echo "$1: rc $? $(grep -c ' PASSED' $R/tests_$1.log) passed, $(grep -c ' FAILED' $R/tests_$1.log) failed at $(( $(date +%s) - t0 )) s"
  pack
}
tests model 90 tests/core/test_model.py cuda
tests adamw 120 tests/core/test_adamw_kernel.py cuda
timeout 90 python3 bench/optimizer_bench.py --presets paper-100m,paper-1b > $R/optimizer.log 2>&1
echo "optimizer at $(( $(date +%s) - t0 )) s:"; grep -E "^\| .*(Triton|adamw=triton)" $R/optimizer.log; pack
timeout 60 python3 bench/profile_step.py --preset paper-100m --methods baseline --out $R > $R/profile_100m.log 2>&1
echo "profile at $(( $(date +%s) - t0 )) s:"; sed -n '/kernel ms per step by kind/,/^$/p' $R/profile_100m.log; pack
bench() {  # $1 tag, $2 preset, $3 methods, $4 copies on/off, $5 limit s
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    --weight-copies $4 > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
bench 100m_off_2 paper-100m baseline off 60
bench 100m_on_2 paper-100m baseline on 60
bench 1b_on_2 paper-1b baseline,mhar on 170
bench 1b_off_2 paper-1b baseline,mhar off 170
