#!/usr/bin/env bash
# session 14 call 5: per call at 1280/73 with two backward warps (the fresh-gradient kind); the whole step at 1280/73 with phase 1's sum of squares elementwise (as before this session) and without the products' prefetch
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$NEW
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 70 python3 bench/routing.py --shapes 1280/36 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --variants --variant-configs '{"bwd 2 warps": {"bwd_warps": 2}}' --out $R/call1280.json > $R/call1280.log 2>&1
grep "^| 1280" $R/call1280.md; pack
timeout 150 python3 bench/routing.py --step-only --shapes 1280/36 --heads 8 --phase1 '{"": null, "sum of squares elementwise": {"dot_sumsq_products": false}, "no prefetch": {"dot_pf": false}}' --out $R/ws1280.json > $R/ws1280.log 2>&1
grep -h "^| 1280/73/H8" $R/ws1280.md; pack
