#!/usr/bin/env bash
# session 24 call 1: the lane-group GPU test at d = 512 (session 23's last COEF change had
# not run there); the 100M baseline with q/k/v and gate/up each as one product
# (MHAR_FUSED_PROJ=1, experimental) against three and two products, 30 steps, one process
# each; then the fused 100M baseline's profile
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 60 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "lane_groups and 512" > $R/tests_512.log 2>&1; tail -n 1 $R/tests_512.log; pack
for f in 0 1; do
  MHAR_FUSED_PROJ=$f timeout 120 python3 -m mhar bench step --preset paper-100m --methods baseline --steps 30 --warmup 3 --out $R --tag 100m_f$f > $R/step_100m_f$f.log 2>&1
  echo "fused=$f"; grep -h "| paper" $R/step_100m_f$f.md; rm -f $R/*.png; pack
done
MHAR_FUSED_PROJ=1 timeout 120 python3 bench/profile_step.py --preset paper-100m --methods baseline --out $R > $R/profile_100m.log 2>&1
tail -n 12 $R/profile_100m.log; pack
