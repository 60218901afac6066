#!/usr/bin/env bash
# Session 60, call 7: the trainer against the bench at the final code, 100M baseline, 8 x 2048 (asked for an H200; an H100 came).
# run: C=<commit> OUT=$OUT bash bench/results/session60/7_final/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" --exclude=checkpoints --exclude=tb r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
timeout 110 python3 -m mhar bench step --preset paper-100m --methods baseline --steps 30 --loss-chunk 8192 \
  --out $R --tag 100m > $R/bench.log 2>&1
echo "bench exit $? at ${SECONDS}s"; grep "^| paper-100m" $R/step_100m.md | head -1; pack
timeout 110 python3 -m mhar train --preset paper-100m --method baseline --out $R/train --quiet \
  data.source=synthetic data.vocab_size=151936 batch_size=8 seq_len=2048 steps=40 eval_every=1000 \
  checkpoint_every=100000 log_every=1 > $R/train.log 2>&1
echo "train exit $? at ${SECONDS}s"; tail -2 $R/train.log | head -1
python3 -c "import json,sys; print([round(json.loads(l)['tokens_per_s']/1e3) for l in open(sys.argv[1])])" $R/train/metrics.jsonl
pack
