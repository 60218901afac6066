#!/usr/bin/env bash
# session 13 call 2 (8e8166b): register caps (maxnreg) for the per-query kernels, per call and in the whole step at 1280/73; GPU tests of the per-query kernels (one head now keeps part A whole)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=8e8166b
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
V='{"fwd 152": {"fwd_maxnreg": 152}, "fwd 128": {"fwd_maxnreg": 128}, "bwd 224": {"bwd_maxnreg": 224}, "bwd 216": {"bwd_maxnreg": 216}, "bwd 200": {"bwd_maxnreg": 200}}'
timeout 150 python3 bench/routing.py --shapes 1280/36 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --variants --variant-configs "$V" --out $R/call.json > $R/call.log 2>&1
grep "^| 1280" $R/call.md; pack
P1='{"": null, "fwd 152": {"fwd_maxnreg": 152}, "bwd 224": {"bwd_maxnreg": 224}, "bwd 216": {"bwd_maxnreg": 216}, "both": {"fwd_maxnreg": 152, "bwd_maxnreg": 224}}'
timeout 120 python3 bench/routing.py --step-only --shapes 1280/36 --heads 1,8 --phase1 "$P1" --out $R/ws1280.json > $R/ws1280.log 2>&1
grep "whole step" $R/ws1280.log; pack
timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -k "route_fp32 or route_bf16 or fused_phase_two or one_program or deterministic or other_tile_configs or sink" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
