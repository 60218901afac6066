#!/usr/bin/env bash
# session 11 call 1: GPU tests of fwd_dot and fwd_wide_b; the whole step with phase 1's forward as products
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $R/gpu.txt 2>&1
timeout 170 python3 -m pytest tests/routing/test_triton_cuda.py -k "products or wide_part_b" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
P1='{"": null, "fwd as products": {"fwd_dot": true}, "fwd as products, 4 warps": {"fwd_dot": true, "dot_warps": 4}, "fwd as products, tf32x3": {"fwd_dot": true, "dot_precision": "tf32x3"}, "fwd wide part B": {"fwd_wide_b": true}}'
timeout 240 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 "$P1" --out $R/ws1280.json > $R/ws1280.log 2>&1
grep "^| 1280" $R/ws1280.log; pack
timeout 120 python3 bench/routing.py --step-only --shapes 1024/24 --phase1 '{"": null, "fwd as products": {"fwd_dot": true}}' --out $R/ws1024.json > $R/ws1024.log 2>&1
grep "^| 1024" $R/ws1024.log; pack
