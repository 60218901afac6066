#!/usr/bin/env bash
# session 42 call 4: inductor's coordinate_descent_tuning on the compiled regions, at 350M
# (baseline and mhar in each process, 30 timed steps): on, off, on. Session 24 saw 33.15
# against 33.35 ms at 100M with it (baseline, one process; 101 s of compiling), a
# candidate to repeat.
# run: C=<commit> OUT=$OUT bash bench/results/session42/4_coord/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
bench() {  # $1 tag, $2 limit s, $3 python run before the bench
  timeout $2 python3 -c "
import runpy, sys, time
import torch._inductor.config as c
$3
sys.argv = ['mhar', 'bench', 'step', '--preset', 'paper-350m', '--methods', 'baseline,mhar', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
t = time.time(); runpy.run_module('mhar', run_name='__main__', alter_sys=True); print('wall s', round(time.time() - t))" > $R/step_$1.log 2>&1
  echo "$1: $(grep -h 'wall s' $R/step_$1.log)"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
bench coord1 220 'c.coordinate_descent_tuning = True'
bench shipped 130 ''
bench coord2 220 'c.coordinate_descent_tuning = True'
