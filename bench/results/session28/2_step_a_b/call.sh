#!/usr/bin/env bash
# session 28 call 2: the one-pass kernel with a tile's max as its only per-tile reduction
# (the sum kept per column, reduced once per row), swept against the two-pass kernel on
# one 4096-row chunk; then the baseline step at 100M and 350M with both changes (one-pass
# CE, tied embedding's gradient into the head's; the bench now hands the embedding over as
# Decoder.loss does) against neither, one process each, 30 steps
# run: C=<commit> OUT=$OUT bash bench/results/session28/2_step_a_b/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 90 python3 bench/loss_bench.py --methods fused --fused-chunks 4096 --chunk 4096 --rep 100 \
  --out $R/loss_sweep.json > $R/loss_sweep.log 2>&1; grep -A 12 "^| kernel BLOCK" $R/loss_sweep.log; pack
bench() {  # $1 tag, $2 preset, $3 limit s, $4 env, $5 python run before the bench
  env $4 timeout $3 python3 -c "
import runpy, sys, time
from mhar.model import Decoder
$5
sys.argv = ['mhar', 'bench', 'step', '--preset', '$2', '--methods', 'baseline', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
t = time.time(); runpy.run_module('mhar', run_name='__main__', alter_sys=True); print('wall s', round(time.time() - t))" > $R/step_$1.log 2>&1
  echo "$1: $(grep -h '| paper' $R/step_$1.md) $(grep -h 'wall s' $R/step_$1.log)"; rm -f $R/*.png; pack
}
UNTIE='Decoder.tied_head_gradient = lambda self, chunk_size: None'
bench 100m_new paper-100m 100 MHAR_CE_ONE_PASS=1 ''
bench 100m_old paper-100m 100 MHAR_CE_ONE_PASS=0 "$UNTIE"
bench 100m_tied_only paper-100m 100 MHAR_CE_ONE_PASS=0 ''
bench 350m_new paper-350m 120 MHAR_CE_ONE_PASS=1 ''
bench 350m_old paper-350m 120 MHAR_CE_ONE_PASS=0 "$UNTIE"
