#!/usr/bin/env bash
# session 40 call 7: the fused COEF pass at 1024 with 9 one-warp programs per SM instead of
# 8: 32-lane pieces capped at 224 registers (offline on triton 3.6: 224 registers, no stack,
# 23,360 bytes of shared memory, so 9 fit an SM; call 3's ncu showed the pass
# latency-bound at 8). One read (--direct-rows) at 9 / 25 / 41 sources; if the COEF pass is
# 4% faster at 41 (pick.py), the 350M step with it.
# run: C=<commit> OUT=$OUT bash bench/results/session40/7_nine_per_sm/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session40/7_nine_per_sm
timeout 80 python3 bench/phase1_call.py --direct-rows --d 1024 --n 9,25,41 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep.json > $R/sweep_1024.md 2>&1; grep "^|" $R/sweep_1024.md | grep -v -- "---"; pack
python3 $D/pick.py $R/sweep_1024.md $R/pick.json || exit 0
timeout 140 env MHAR_ROUTING_CONFIG=$R/pick.json python3 -m mhar bench step --preset paper-350m --methods baseline,mhar \
  --steps 30 --warmup 3 --out $R --tag 350m_nine > $R/step_350m_nine.log 2>&1
grep -h "| paper" $R/step_350m_nine.md | sort -u; rm -f $R/*.png; pack
