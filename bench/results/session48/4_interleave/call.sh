#!/usr/bin/env bash
# session 48 call 4: `mhar bench step --interleave` (new: each method's steps in turn with
# the baseline's, both models alive) on the GPU: its test (the ratio from the step pairs,
# each model's peak memory as in the sequential run), then 350M baseline and mhar
# interleaved in two processes against the sequential run in one, and 100M interleaved.
# run: C=<commit> OUT=$OUT bash bench/results/session48/4_interleave/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/train/test_bench_step.py -k "interleaved or writes_table" \
  > $R/tests.log 2>&1; echo "rc=$? tests"; tail -2 $R/tests.log; pack
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 350m_il_a paper-350m baseline,mhar 20 150 --interleave
step 350m_seq paper-350m baseline,mhar 20 150
step 350m_il_b paper-350m baseline,mhar 20 150 --interleave
step 100m_il paper-100m baseline,mhar 30 120 --interleave
