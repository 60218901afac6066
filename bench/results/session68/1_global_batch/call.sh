#!/usr/bin/env bash
# Session 68, call 1: 350M and 1B at the trainer presets' microbatch (`--batch global`, 32 x 1024,
# the paper's global batch as one microbatch), with the defaults as of session 65 (the fused
# loss's hand-over on), which no H200 has timed at this microbatch (sessions 44-47 did, before it).
# Methods: baseline, mhar, mhar-block (H = 8 against H = 1 is met at the bench's microbatches),
# each preset in one process, 30 timed steps, graphed.
# Runs only on an H200 (the bars are set for it); on another card it prints the card and stops.
# run: C=<commit> OUT=$OUT bash bench/results/session68/1_global_batch/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
grep -q H200 $R/gpu.csv || exit 0
for p in 350m:200 1b:300; do
  size=${p%:*}; limit=${p#*:}
  timeout $limit python3 -m mhar bench step --preset paper-$size --batch global --methods baseline,mhar,mhar-block \
    --steps 30 --warmup 3 --out $R --tag ${size}_global > $R/step_$size.log 2>&1
  echo "rc=$? $size at ${SECONDS}s"; grep -h "| paper" $R/step_${size}_global.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png
  tar czf $OUT/r.tar.gz -C $OUT r  # one archive: a call returns only a few files
done
