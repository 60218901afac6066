#!/usr/bin/env bash
# session 24 call 5: where the bars stand at this commit (session 23's last COEF change
# and this session's baseline clean-up): 1B baseline, attnres, mhar, 30 steps, one
# process; the fused-loss and model GPU tests; then 100M, all five methods
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 230 python3 -m mhar bench step --preset paper-1b --methods baseline,attnres,mhar --steps 30 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/*.png; pack
timeout 150 python3 -m pytest tests/core/test_fused_ce.py tests/core/test_model.py -q -x > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
timeout 140 python3 -m mhar bench step --preset paper-100m --methods baseline,hyper,attnres,mhar,mhar-block --steps 30 --warmup 3 --out $R --tag 100m > $R/step_100m.log 2>&1
grep -h "| paper" $R/step_100m.md; rm -f $R/*.png; pack
