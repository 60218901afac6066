#!/usr/bin/env bash
# session 16 call 5: the 100M baseline's step with 8 microbatches per update under the profiler (bench/profile_step.py --accum 8); the 1B and 350M steps with the recipe's accumulation (2 microbatches per update): baseline, mhar, mhar-block
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 100 python3 bench/profile_step.py --preset paper-100m --methods baseline --accum 8 --out $R > $R/profile_100m_accum8.log 2>&1
tail -n 11 $R/profile_100m_accum8.log; pack
timeout 250 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar,mhar-block --steps 5 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/step_1b.png; pack
timeout 200 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar,mhar-block --steps 5 --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md; rm -f $R/step_350m.png; pack
