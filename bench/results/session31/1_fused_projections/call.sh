#!/usr/bin/env bash
# session 31 call 1: fused projections (q/k/v and gate/up each one product under
# torch.compile, `--fused-projections on|off`). A/B in alternate processes, the baseline
# at 100M, 350M and 1B (each setting once, the order alternated between presets).
# 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session31/1_fused_projections/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv > $R/gpu.csv 2>&1; cat $R/gpu.csv
bench() {  # $1 tag, $2 preset, $3 methods, $4 fused on/off, $5 limit s
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    --fused-projections $4 > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
bench 100m_off paper-100m baseline off 80
bench 100m_on paper-100m baseline on 80
bench 350m_on paper-350m baseline on 90
bench 350m_off paper-350m baseline off 90
bench 1b_off paper-1b baseline off 100
bench 1b_on paper-1b baseline on 100
