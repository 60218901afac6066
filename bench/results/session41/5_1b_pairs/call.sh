#!/usr/bin/env bash
# session 41 call 5: the 1B step (baseline, mhar) with the fused COEF pass at 1280 off
# (off.json: the two passes, as before this session) and on (as built), alternating,
# one process each, as many as the call's time allows.
# run: C=<commit> OUT=$OUT bash bench/results/session41/5_1b_pairs/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session41/5_1b_pairs
for run in off_1 on_1 off_2 on_2; do
  cfg=""; case $run in off*) cfg=$D/off.json;; esac
  timeout 80 env ${cfg:+MHAR_ROUTING_CONFIG=$cfg} python3 -m mhar bench step --preset paper-1b --methods baseline,mhar \
    --steps 30 --warmup 3 --out $R --tag 1b_$run > $R/step_1b_$run.log 2>&1
  echo "$run"; grep -h "| paper" $R/step_1b_$run.md | sort -u; rm -f $R/*.png; pack
done
