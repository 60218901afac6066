#!/usr/bin/env bash
# Session 60, call 3: call 1's `mhar train` stepped at 39.8 ms where call 2's direct
# train_step calls took 35.5 (100M baseline, 8 x 2048, H100). Here: the command again, first
# thing on the machine, every step logged; then in one process Trainer.fit for 40 steps and
# the same trainer's train_step called directly (bench/trainer_probe.py --fit 40).
# run: C=<commit> OUT=$OUT bash bench/results/session60/3_fit_loop/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" --exclude=checkpoints --exclude=tb r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
timeout 170 python3 -m mhar train --preset paper-100m --method baseline --out $R/train --quiet \
  data.source=synthetic data.vocab_size=151936 batch_size=8 seq_len=2048 steps=40 eval_every=1000 \
  checkpoint_every=100000 log_every=1 > $R/train.log 2>&1
echo "train exit $? at ${SECONDS}s"; tail -2 $R/train.log
python3 -c "import json,sys; print([round(json.loads(l)['tokens_per_s']/1e3) for l in open(sys.argv[1])])" $R/train/metrics.jsonl
pack
timeout 300 python3 bench/trainer_probe.py --preset paper-100m --method baseline --batch 8 --fit 40 \
  --out $R > $R/probe.log 2>&1
echo "probe exit $? at ${SECONDS}s"; grep "^|" $R/trainer_probe_paper-100m_baseline.txt
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(k, [round(x,1) for x in v['steps_ms']]) for k,v in d.items()]" $R/trainer_probe_paper-100m_baseline.json
pack
