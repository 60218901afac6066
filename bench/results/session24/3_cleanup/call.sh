#!/usr/bin/env bash
# session 24 call 3: the final norm compiled, the LM head's gradient written by its first
# chunk (no zero fill) and scaled by a foreach product ("new", this commit) against
# 6586237 ("old": its src/ copied to ab_old/ for the call); the 100M baseline, 30 steps,
# one process each, in the order old new old new; then new with inductor's mix-order
# reduction split 64 rows (norm-weight partials 256 x d instead of 1024 x d); then the
# fused-loss and model GPU tests
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
bench() {  # $1 tag, $2 src, $3 mix-order split ('' = inductor's)
  PYTHONPATH=$2 timeout 120 python3 -c "
import runpy, sys
import torch._inductor.config as c
if '$3': c.triton.mix_order_reduction_split_size = int('$3')
sys.argv = ['mhar', 'bench', 'step', '--preset', 'paper-100m', '--methods', 'baseline', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
runpy.run_module('mhar', run_name='__main__', alter_sys=True)" > $R/step_$1.log 2>&1
  echo "$1: $(grep -h '| paper' $R/step_$1.md)"; rm -f $R/*.png; pack
}
bench old1 $PWD/ab_old/src ''
bench new1 $PWD/src ''
bench old2 $PWD/ab_old/src ''
bench new2 $PWD/src ''
bench new_split64 $PWD/src 64
PYTHONPATH=$PWD/src timeout 120 python3 -m pytest tests/core/test_fused_ce.py tests/core/test_model.py -q -x > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
