#!/usr/bin/env bash
# session 49 call 5: cuDNN attention on the model's transposed (B, T, H, hd) views against
# contiguous (B, H, T, hd) tensors, forward + backward per layer, at the three presets
# (bench/attention_bench.py --bhsd, new; the output gradient now in the model's layout).
# run: C=<commit> OUT=$OUT bash bench/results/session49/5_attention_layout/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 240 python3 bench/attention_bench.py --backends auto,cudnn --bhsd --out $R/attention.json > $R/attention.log 2>&1
echo "rc=$?"; tail -n 14 $R/attention.log
