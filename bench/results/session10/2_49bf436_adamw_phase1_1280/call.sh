#!/usr/bin/env bash
# session 10 call 2: optimizer geometries, adamw steps, phase-1 variants at 1280/36
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 60 python3 -m pytest tests/core/test_adamw_kernel.py -k cuda -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log
timeout 90 python3 bench/optimizer_bench.py --presets paper-350m,paper-1b --triton-configs 4096x8,2048x8,512x4 > $R/opt.log 2>&1; grep "^| paper" $R/opt.log; pack
for impl in torch triton; do
  timeout 110 python3 -m mhar bench step --preset paper-350m --methods baseline --steps 8 --warmup 3 --adamw $impl --out $R --tag 350m-$impl > $R/step_$impl.log 2>&1
  grep -h "| paper" $R/step_350m-$impl.md; pack
done
P1='{"": null, "fwd 1 warp": {"fwd_warps": 1}, "fwd 2 warps": {"fwd_warps": 2}, "bwd 2 warps": {"bwd_warps": 2}, "fwd 4 queries": {"fwd_queries": 4}, "COEF 2 queries, 4 warps": {"coef_queries": 2, "coef_queries_warps": 4}}'
timeout 260 python3 bench/routing.py --step-only --shapes 1280/36 --heads 1,8 --phase1 "$P1" --out $R/ws1280.json --write-phase1-config $R/picks1280.json > $R/ws1280.log 2>&1
grep "whole step H" $R/ws1280.log; pack
