#!/usr/bin/env bash
# session 50 call 1: FlexAttention (inductor's Triton kernels, causal block mask, GQA)
# against cuDNN, forward + backward per layer at the three presets; then flex with
# inductor's autotuning, one preset at a time (each result written as it comes).
# run: C=<commit> OUT=$OUT bash bench/results/session50/1_flex_attention/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 200 python3 bench/attention_bench.py --backends auto,cudnn,flex --out $R/attention.json > $R/attention.log 2>&1
echo "rc=$?"; tail -n 12 $R/attention.log
for p in paper-350m paper-1b paper-100m; do
  timeout 120 python3 bench/attention_bench.py --presets $p --backends flex-tuned --out $R/tuned_$p.json > $R/tuned_$p.log 2>&1
  echo "$p rc=$?"; tail -n 2 $R/tuned_$p.log
done
