#!/usr/bin/env bash
# session 17 call 2: the gather's right operand all bf16 ([g ; w_hi ; w_lo ; 0], one load
# per chunk, two products) with phase 1's backward in final form: the whole step's routing
# kernels at 1280/73 and 1024/49 with 8 heads, the session's starting commit (ab_old/src)
# and this one in one call, chunks of 8 and 16; then the 1B training step, baseline and
# mhar with chunks of 8, and mhar with chunks of 16 (a second process)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
for s in 1280/36 1024/24; do
  n=${s%/*}
  for v in old:8 new:8 new:16; do
    src=$PWD/src; [ ${v%:*} = old ] && src=$PWD/ab_old/src
    k=${v%:*}_s${v#*:}
    PYTHONPATH=$src timeout 80 python3 bench/routing.py --step-only --no-one-pass --shapes $s --heads 8 --chunk ${v#*:} --phase1 '{"": null}' --out $R/ws${n}_$k.json > $R/ws${n}_$k.log 2>&1
    echo "$k"; grep -h "| two-phase" $R/ws${n}_$k.md | cut -c1-200; pack
  done
done
export PYTHONPATH=$PWD/src
timeout 150 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --chunk 8 --steps 30 --warmup 3 --out $R --tag 1b_s8 > $R/step_1b_s8.log 2>&1
grep -h "| paper" $R/step_1b_s8.md; rm -f $R/*.png; pack
timeout 100 python3 -m mhar bench step --preset paper-1b --methods mhar --chunk 16 --steps 30 --warmup 3 --out $R --tag 1b_s16 > $R/step_1b_s16.log 2>&1
grep -h "| paper" $R/step_1b_s16.md; rm -f $R/*.png; pack
