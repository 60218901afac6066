#!/usr/bin/env bash
# Session 60, call 6: the trainer against the bench at 350M (baseline, 16 x 1024), with the
# step queued ahead; and call 5's one failing test, fixed (it assumed a CPU).
# run: C=<commit> OUT=$OUT bash bench/results/session60/6_350m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" --exclude=checkpoints --exclude=tb r; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.csv
OMP_NUM_THREADS=4 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/train/test_compare_cli.py -k mfu > $R/test.log 2>&1
echo "test exit $? at ${SECONDS}s"; tail -1 $R/test.log; pack
timeout 170 python3 -m mhar bench step --preset paper-350m --methods baseline --steps 20 --loss-chunk 8192 \
  --out $R --tag 350m > $R/bench.log 2>&1
echo "bench exit $? at ${SECONDS}s"; grep "^| paper-350m" $R/step_350m.md | head -1; pack
timeout 170 python3 -m mhar train --preset paper-350m --method baseline --out $R/train --quiet \
  data.source=synthetic data.vocab_size=151936 batch_size=16 seq_len=1024 steps=30 eval_every=1000 \
  checkpoint_every=100000 log_every=1 > $R/train.log 2>&1
echo "train exit $? at ${SECONDS}s"; tail -2 $R/train.log | head -1
python3 -c "import json,sys; print([round(json.loads(l)['tokens_per_s']/1e3,1) for l in open(sys.argv[1])])" $R/train/metrics.jsonl
pack
