#!/usr/bin/env bash
# session 28 call 1: the one-pass CE kernel (one read and one write of the logits instead
# of two reads and a write) and the tied embedding's gradient added into the LM head's
# (no second dense vocab x d gradient, no add). GPU tests of the fused loss, then the
# 100M baseline step with each change on and off, one process each, then the loss bench
# (kernel sweep on one 4096-row chunk, both kernels side by side), then the CUDA-graph tests.
# run: C=<commit> OUT=$OUT bash bench/results/session28/1_one_pass_tied/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
FILES="tests/core/test_fused_ce.py" T_FILE=120 bash bench/gpu_tests.sh
bench() {  # $1 tag, $2 preset, $3 limit s, $4 env, $5 python run before the bench
  env $4 timeout $3 python3 -c "
import runpy, sys, time
from mhar.model import Decoder
$5
sys.argv = ['mhar', 'bench', 'step', '--preset', '$2', '--methods', 'baseline', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
t = time.time(); runpy.run_module('mhar', run_name='__main__', alter_sys=True); print('wall s', round(time.time() - t))" > $R/step_$1.log 2>&1
  echo "$1: $(grep -h '| paper' $R/step_$1.md) $(grep -h 'wall s' $R/step_$1.log)"; rm -f $R/*.png; pack
}
UNTIE='Decoder._plain_tied_embedding = lambda self: False'
bench 100m_new paper-100m 110 MHAR_CE_ONE_PASS=1 ''
bench 100m_old paper-100m 100 MHAR_CE_ONE_PASS=0 "$UNTIE"
timeout 100 python3 bench/loss_bench.py --methods fused,matmuls-only --fused-chunks 4096 --chunk 4096 --rep 100 \
  --out $R/loss_one_pass.json > $R/loss_one_pass.log 2>&1; tail -n 12 $R/loss_one_pass.log; pack
bench 100m_one_pass_only paper-100m 100 MHAR_CE_ONE_PASS=1 "$UNTIE"
bench 100m_tied_only paper-100m 100 MHAR_CE_ONE_PASS=0 ''
FILES="tests/train/test_cuda_graphs.py" T_FILE=100 bash bench/gpu_tests.sh
