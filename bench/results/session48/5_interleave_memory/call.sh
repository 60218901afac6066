#!/usr/bin/env bash
# session 48 call 5: --interleave's memory with what the process keeps once allocated
# counted in every row (call 4: mhar 27.93 GB interleaved against 28.13 sequential at
# 350M; the GPU test failed at tiny shapes, 0.074 against 0.678 GB): the test again, then
# 350M baseline and mhar interleaved.
# run: C=<commit> OUT=$OUT bash bench/results/session48/5_interleave_memory/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/train/test_bench_step.py -k "interleaved" \
  > $R/tests.log 2>&1; echo "rc=$? tests"; tail -2 $R/tests.log; pack
timeout 150 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar --steps 20 --warmup 3 \
  --out $R --tag 350m_il --interleave > $R/step_350m_il.log 2>&1
echo "rc=$? 350m_il"; grep -h "| paper" $R/step_350m_il.md; rm -f $R/*.png; pack
