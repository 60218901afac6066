#!/usr/bin/env bash
# session 33 call 2 (written in session 32): op's "rows_bf16" at 1B and 100M: baseline and mhar, on (the
# default) and off (MHAR_ROUTING_CONFIG), one process each, 30 steps.
# run: C=<commit> OUT=$OUT bash bench/results/session33/2_rows_bf16_1b_100m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
echo '{"*": {"rows_bf16": false}}' > $R/rows_fp32.json
for p in 1b 100m; do for m in on off; do
  env $([ $m = off ] && echo MHAR_ROUTING_CONFIG=$R/rows_fp32.json) timeout 165 python3 -m mhar bench step --preset paper-$p \
    --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag ${p}_$m > $R/step_${p}_$m.log 2>&1
  echo "rows_bf16 $p $m"; grep -h "| paper" $R/step_${p}_$m.md; rm -f $R/*.png; pack
done; done
