#!/usr/bin/env bash
# session 26 call 3: inductor's combo kernels (horizontal fusion of independent kernels,
# e.g. a region's weight casts) for the baseline's compiled regions: the gaps between
# kernels are 2.0 / 7.9 ms of the 100M / 350M steps (floors.md). As shipped against
# torch._inductor.config.combo_kernels = True, one process each, 30 steps
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
bench() {  # $1 tag, $2 preset, $3 limit s, $4 python run before the bench
  timeout $3 python3 -c "
import runpy, sys, time
import torch._inductor.config as c
$4
sys.argv = ['mhar', 'bench', 'step', '--preset', '$2', '--methods', 'baseline', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
t = time.time(); runpy.run_module('mhar', run_name='__main__', alter_sys=True); print('wall s', round(time.time() - t))" > $R/step_$1.log 2>&1
  echo "$1: $(grep -h '| paper' $R/step_$1.md) $(grep -h 'wall s' $R/step_$1.log)"; rm -f $R/*.png; pack
}
bench 100m_shipped paper-100m 100 ''
bench 100m_combo paper-100m 150 'c.combo_kernels = True'
bench 350m_shipped paper-350m 110 ''
bench 350m_combo paper-350m 160 'c.combo_kernels = True'
