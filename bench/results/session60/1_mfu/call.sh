#!/usr/bin/env bash
# Session 60, call 1: MFU against the GPU's own peak (mhar.gpu_peak), on a GPU.
#  1. the new tests there (the table's entry for this GPU; bench step's MFU column);
#  2. `mhar bench step` at 100M, baseline and mhar, 8 x 2048, the trainer preset's loss chunk;
#  3. `mhar train` of the same two models at the same microbatch (synthetic tokens, 40 steps),
#     whose summary's MFU (the median step's, first step left out) sets the trainer against the bench.
# run: C=<commit> OUT=$OUT bash bench/results/session60/1_mfu/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" --exclude=checkpoints --exclude=tb r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" | tee $R/versions.txt
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/core/test_gpu_peak.py \
  tests/train/test_bench_step.py -k "peak or mfu or bar_lines" > $R/tests.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -3 $R/tests.log; pack
timeout 200 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar --steps 30 --loss-chunk 8192 \
  --out $R --tag 100m > $R/bench.log 2>&1
echo "bench exit $? at ${SECONDS}s"; grep "^| paper-100m" $R/step_100m.md; pack
for m in baseline mhar; do
  timeout 170 python3 -m mhar train --preset paper-100m --method $m --out $R/train_$m --quiet \
    data.source=synthetic data.vocab_size=151936 batch_size=8 seq_len=2048 steps=40 eval_every=1000 \
    checkpoint_every=100000 > $R/train_$m.log 2>&1
  echo "train $m exit $? at ${SECONDS}s"; tail -2 $R/train_$m.log
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print({k: s.get(k) for k in ('tokens_per_s','steady_tokens_per_s','mfu','peak_tflops','peak_from','compile','cuda_graphs','adamw')})" $R/train_$m/summary.json
  pack
done
