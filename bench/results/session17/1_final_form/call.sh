#!/usr/bin/env bash
# session 17 call 1: phase 1's backward from its sites' reads in final form (their bf16
# upstream gradients through a pointer table, g.x as one bf16 product, no fp32 row
# gradients written or read): the routing GPU tests; the COEF products at 16 queries
# compiled on the device (shared memory, against the offline compile); the whole step's
# routing kernels at 1280/73 and 1024/49 with 8 heads, the previous commit (ab_old/src)
# and this one side by side in one call; chunks of 16 at 1280
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
PYTHONPATH=$PWD/src timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
PYTHONPATH=$PWD/src timeout 60 python3 bench/compile_sm90.py --kernels dot --shapes 1280/8,1024/8 --dot-queries 16 > $R/compile_dev.md 2>&1; grep coef $R/compile_dev.md | cut -c1-120; pack
for s in 1280/36 1024/24; do
  n=${s%/*}
  for v in old new; do
    src=$PWD/src; [ $v = old ] && src=$PWD/ab_old/src
    PYTHONPATH=$src timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes $s --heads 8 --phase1 '{"": null}' --out $R/ws${n}_${v}.json > $R/ws${n}_${v}.log 2>&1
    echo "$v"; grep -h "| two-phase" $R/ws${n}_${v}.md | cut -c1-200; pack
  done
done
PYTHONPATH=$PWD/src timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes 1280/36 --heads 8 --chunk 16 --phase1 '{"": null}' --out $R/ws1280_new_s16.json > $R/ws1280_new_s16.log 2>&1
grep -h "| two-phase\|does not fit" $R/ws1280_new_s16.md $R/ws1280_new_s16.log | cut -c1-200; pack
