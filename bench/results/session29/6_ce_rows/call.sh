#!/usr/bin/env bash
# session 29 call 6: the one-pass loss kernel with several rows per program (their tiles
# read side by side, one reduction of a (rows, BLOCK) tile per step for all of them):
# (1) the launch sweep on one 4096-row chunk; (2) the 100M baseline step with the sweep's
# fastest one-pass launch (MHAR_CE_BLOCK / _WARPS / _ROWS) against the default (one row,
# 8192 columns, 8 warps), alternated, two processes each; (3) the fused loss's GPU tests
# with the fastest launch
# run: C=<commit> OUT=$OUT bash bench/results/session29/6_ce_rows/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
timeout 70 python3 bench/loss_bench.py --methods fused --fused-chunks 4096 --chunk 4096 --rep 100 \
  --out $R/loss_sweep.json > $R/loss_sweep.log 2>&1; grep -A 16 "^| kernel |" $R/loss_sweep.log; pack
BEST=$(python3 -c "
import json
rows = [r for r in json.load(open('$R/loss_sweep.json'))['kernel_sweep'] if r['kernel'] == 'one-pass' and 'ms' in r]
b = min(rows, key=lambda r: r['ms'])
print(f\"MHAR_CE_BLOCK={b['block']} MHAR_CE_WARPS={b['num_warps']} MHAR_CE_ROWS={b['rows']}\")")
echo "sweep done at $(( $(date +%s) - t0 )) s; fastest: $BEST" | tee $R/best.txt
bench() {  # $1 tag, $2 env
  env $2 timeout 45 python3 -m mhar bench step --preset paper-100m --methods baseline --steps 30 --warmup 3 \
    --out $R --tag $1 > $R/step_$1.log 2>&1
  echo "$1 ($2) at $(( $(date +%s) - t0 )) s: $(grep -h '| paper' $R/step_$1.md)"; rm -f $R/*.png; pack
}
bench 100m_default_1 X=1
bench 100m_best_1 "$BEST"
bench 100m_default_2 X=1
bench 100m_best_2 "$BEST"
env $BEST timeout 75 python3 -m pytest tests/core/test_fused_ce.py -v --tb=long -p no:cacheprovider \
  > $R/test_fused_ce.log 2>&1
echo "tests ($BEST): $(grep -c ' PASSED' $R/test_fused_ce.log) passed, $(grep -c ' FAILED' $R/test_fused_ce.log) failed; $(tail -n 1 $R/test_fused_ce.log | cut -c1-120)"; pack
