#!/usr/bin/env bash
# session 24 call 4: inductor settings for the compiled regions, 100M baseline, 30 steps,
# one process each: as shipped; programmatic dependent launch (TORCHINDUCTOR_ENABLE_PDL=1);
# coordinate-descent tuning of the generated kernels; mode max-autotune-no-cudagraphs
# (products against Triton templates, epilogues fused)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
bench() {  # $1 tag, $2 limit s, $3 python run before the bench
  timeout $2 python3 -c "
import runpy, sys, time
import torch._inductor.config as c
import mhar.model.decoder as D
$3
sys.argv = ['mhar', 'bench', 'step', '--preset', 'paper-100m', '--methods', 'baseline', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
t = time.time(); runpy.run_module('mhar', run_name='__main__', alter_sys=True); print('wall s', round(time.time() - t))" > $R/step_$1.log 2>&1
  echo "$1: $(grep -h '| paper' $R/step_$1.md) $(grep -h 'wall s' $R/step_$1.log)"; rm -f $R/*.png; pack
}
bench shipped 120 ''
TORCHINDUCTOR_ENABLE_PDL=1 bench pdl 120 ''
bench coord 200 'c.coordinate_descent_tuning = True'
bench autotune 330 'orig = D.Decoder.compile_regions
D.Decoder.compile_regions = lambda self, **kw: orig(self, mode="max-autotune-no-cudagraphs", **kw)'
