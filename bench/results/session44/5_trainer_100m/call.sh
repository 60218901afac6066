#!/usr/bin/env bash
# session 44 call 5: `mhar train` with the paper-100m preset as shipped (one microbatch of
# 64 x 2048 = 131,072 tokens, the paper's global batch), MHAR, on the GPU: the launch that
# failed in call 2 (through the bench) is in the trainer's step too. 12 steps, synthetic data.
# run: C=<commit> OUT=$OUT bash bench/results/session44/5_trainer_100m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 300 python3 -m mhar train --preset paper-100m --method mhar --quiet --out $R/run steps=12 warmup=2 \
  data.source=synthetic data.vocab_size=151936 vocab_from_data=false eval_every=1000 checkpoint_every=1000 \
  keep_last=1 data.val_windows=2 > $R/train.log 2>&1
echo "rc $?"; tail -6 $R/train.log
rm -rf $R/run/checkpoints; ls $R/run
