#!/usr/bin/env bash
# session 18 call 1: phase 1's product kernels (forward and COEF pass) with the prefetch
# running on across tokens: the whole step's routing kernels at 1280/73 and 1024/49 with 8
# heads, the session's starting commit (ab_old/src) and this one in one call; the GPU
# tests of phase 1; then, if the new kernels are faster at 1280, the 1B training step
# (baseline and mhar, 30 timed steps)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
kms() { grep -h "| two-phase" $1 | awk -F'|' '{print $5}' | tr -d ' '; }
for s in 1280/36 1024/24; do
  n=${s%/*}
  for v in old new old new; do
    src=$PWD/src; [ $v = old ] && src=$PWD/ab_old/src
    f=$R/ws${n}_$v; [ -e $f.md ] && f=${f}_2
    PYTHONPATH=$src timeout 80 python3 bench/routing.py --step-only --no-one-pass --shapes $s --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
    echo "$n $v $(grep -h '| two-phase' $f.md | cut -c1-220)"; pack
  done
done
export PYTHONPATH=$PWD/src
timeout 170 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "phase_one or two_phase or sink or coef" > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
o=$(kms $R/ws1280_old.md); n=$(kms $R/ws1280_new.md)
if python3 -c "import sys; sys.exit(0 if float('$n') < float('$o') - 1.0 else 1)"; then
  timeout 160 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
  grep -h "| paper" $R/step_1b.md; rm -f $R/*.png; pack
fi
