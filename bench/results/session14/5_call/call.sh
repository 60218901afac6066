#!/usr/bin/env bash
# session 14 call 5 (b3b1280): per call at 1280/73 with two backward warps (the fresh-gradient kind); the whole step at 1280/73 with phase 1's products without prefetch
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$NEW
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 70 python3 bench/routing.py --shapes 1280/36 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --variants --variant-configs '{"bwd 2 warps": {"bwd_warps": 2}}' --out $R/call1280.json > $R/call1280.log 2>&1
grep "^| 1280" $R/call1280.md; pack
timeout 100 python3 bench/routing.py --step-only --shapes 1280/36 --heads 8 --phase1 '{"": null, "no prefetch": {"dot_pf": false}}' --out $R/ws1280.json > $R/ws1280.log 2>&1
grep -h "H=8 two-phase\|_dot_kernel" $R/ws1280.log; pack
