#!/usr/bin/env bash
# Session 60, call 5: fit with the next step queued before the last one's loss is read.
#  1. `mhar bench step` at 100M (baseline, mhar; 8 x 2048; the trainer preset's loss chunk);
#  2. `mhar train` of both at the same microbatch, 40 steps, every step logged;
#  3. bench/fit_loop_probe.py's "as is" and "train_step loop" rows (baseline);
#  4. the GPU test files the change touches, in parallel shards.
# run: C=<commit> OUT=$OUT bash bench/results/session60/5_ahead/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" --exclude=checkpoints --exclude=tb r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar --steps 30 --loss-chunk 8192 \
  --out $R --tag 100m > $R/bench.log 2>&1
echo "bench exit $? at ${SECONDS}s"; grep "^| paper-100m" $R/step_100m.md | head -2; pack
for m in baseline mhar; do
  timeout 120 python3 -m mhar train --preset paper-100m --method $m --out $R/train_$m --quiet \
    data.source=synthetic data.vocab_size=151936 batch_size=8 seq_len=2048 steps=40 eval_every=1000 \
    checkpoint_every=100000 log_every=1 > $R/train_$m.log 2>&1
  echo "train $m exit $? at ${SECONDS}s"; tail -2 $R/train_$m.log | head -1
  python3 -c "import json,sys; print([round(json.loads(l)['tokens_per_s']/1e3) for l in open(sys.argv[1])])" $R/train_$m/metrics.jsonl
  pack
done
cat > $R/files.txt <<'F'
tests/core/test_adamw_kernel.py tests/train/test_cuda_graphs.py tests/train/test_activation_checkpointing.py
tests/train/test_bench_step.py tests/core/test_gpu_peak.py tests/train/test_compare_cli.py::test_train_logs_mfu_against_the_devices_peak
F
FILES="$(cat $R/files.txt)" WAVE_S=$((585 - SECONDS)) END_S=590 SHARDS=6 OUT=$OUT/t bash bench/results/session59/1_gpu_tests/call.sh > $R/tests.log 2>&1
tail -8 $R/tests.log
pack
