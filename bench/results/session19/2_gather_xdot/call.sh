#!/usr/bin/env bash
# session 19 call 2: phase 1's gather with -(sum c) x and the running sum taken as matrix
# products too (diag(-c) x + I prev; "xdot", on at this commit), so that triton's
# pipeliner copies the sources' and sums' tiles ahead like the products' other operands,
# against the walk of call 1 ("walk": gather_xdot off) and the session's starting commit
# ("old", ab_old/src); variants: uncapped at 1280 ("xnocap"), two stages ("xs2"). Whole
# step's routing kernels at 1280/73 and 1024/49 with 8 heads; then the GPU tests that run
# the gather
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{"*": {"gather_xdot": false}}' > $R/walk.cfg.json
echo '{}' > $R/xdot.cfg.json
echo '{"1280,1": {"gather_maxnreg": null}}' > $R/xnocap.cfg.json
echo '{"*": {"gather_stages": 2}}' > $R/xs2.cfg.json
for s in 1280/36 1024/24; do
  n=${s%/*}
  vs="old walk xdot xnocap xs2 walk xdot"; [ $n = 1024 ] && vs="walk xdot xs2 walk xdot"
  for v in $vs; do
    src=$PWD/src; cfg=$R/$v.cfg.json
    [ $v = old ] && src=$PWD/ab_old/src && cfg=
    f=$R/ws${n}_$v; [ -e $f.md ] && f=${f}_2
    MHAR_ROUTING_CONFIG=$cfg PYTHONPATH=$src timeout 80 python3 bench/routing.py --step-only --no-one-pass --shapes $s --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
    echo "$n $v $(grep -h '| two-phase' $f.md | cut -c1-200)"; pack
  done
done
export PYTHONPATH=$PWD/src
timeout 240 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "partial or two_phase or phase_one_rows or sink" > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
