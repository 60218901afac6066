#!/usr/bin/env bash
# session 29 call 1: the one-pass loss kernel's launches swept on one 4096-row chunk
# (tile, warps, the next tile's load issued ahead, evict-first / streaming hints); then
# the 100M baseline step under inductor's mix-order reduction settings (the norms' weight
# gradients: partial sums in the norm's backward kernel, finished by an eager aten.sum of
# (rows / split) x d partials): the default split (16 rows: 1024 x 512 partials), 64, 128,
# and mix-order off; one process each, 30 steps
# run: C=<commit> OUT=$OUT bash bench/results/session29/1_ce_sweep_mix_order/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
timeout 150 python3 bench/loss_bench.py --methods fused --fused-chunks 4096 --chunk 4096 --rep 100 \
  --out $R/loss_sweep.json > $R/loss_sweep.log 2>&1; grep -A 36 "^| kernel |" $R/loss_sweep.log; pack
echo "sweep done at $(( $(date +%s) - t0 )) s"
bench() {  # $1 tag, $2 preset, $3 limit s, $4 env, $5 python run before the bench
  env $4 timeout $3 python3 -c "
import runpy, sys, time
import torch._inductor.config as ic
$5
sys.argv = ['mhar', 'bench', 'step', '--preset', '$2', '--methods', 'baseline', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
t = time.time(); runpy.run_module('mhar', run_name='__main__', alter_sys=True); print('wall s', round(time.time() - t))" > $R/step_$1.log 2>&1
  echo "$1: $(grep -h '| paper' $R/step_$1.md) $(grep -h 'wall s' $R/step_$1.log) at $(( $(date +%s) - t0 )) s"; rm -f $R/*.png; pack
}
bench 100m_default paper-100m 110 X=1 ''
bench 100m_split64 paper-100m 110 X=1 'ic.triton.mix_order_reduction_split_size = 64'
bench 100m_mix_off paper-100m 110 TORCHINDUCTOR_MIX_ORDER_REDUCTION=0 ''
bench 100m_split128 paper-100m 110 X=1 'ic.triton.mix_order_reduction_split_size = 128'
bench 100m_split32 paper-100m 110 X=1 'ic.triton.mix_order_reduction_split_size = 32'
