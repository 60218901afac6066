#!/usr/bin/env bash
# session 16 call 2: SDPA's backends at the three paper attention shapes (bench/attention_bench.py); the 100M step with the recipe's accumulation (8 microbatches per update): baseline, mhar, mhar-block; the 100M baseline with --accum 1 in its own process
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 120 python3 bench/attention_bench.py --out $R/attention.json > $R/attention.log 2>&1
grep "^|" $R/attention.log; pack
timeout 260 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar,mhar-block --steps 5 --warmup 3 --out $R --tag 100m > $R/step_100m.log 2>&1
grep -h "| paper" $R/step_100m.md; rm -f $R/step_100m.png; pack
timeout 100 python3 -m mhar bench step --preset paper-100m --methods baseline --accum 1 --steps 5 --warmup 3 --out $R --tag 100m_accum1 > $R/step_100m_accum1.log 2>&1
grep -h "| paper" $R/step_100m_accum1.md; rm -f $R/step_100m_accum1.png; pack
