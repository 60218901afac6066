#!/usr/bin/env bash
# session 15 call 1 (732e4ea): per call at 1280/73 with register caps and programs per SM for the one-query backward (fresh gradients); the first part of the GPU routing tests with the bf16x3 gather default
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=732e4ea
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
V='{"bwd 224": {"bwd_maxnreg": 224}, "bwd 208": {"bwd_maxnreg": 208}, "bwd 208, 9 per SM": {"bwd_maxnreg": 208, "bwd_progs_per_sm": 9}, "bwd 208, 18 per SM": {"bwd_maxnreg": 208, "bwd_progs_per_sm": 18}, "8 per SM": {"bwd_progs_per_sm": 8}, "9 per SM": {"bwd_progs_per_sm": 9}, "bwd 200, 10 per SM": {"bwd_maxnreg": 200, "bwd_progs_per_sm": 10}}'
timeout 170 python3 bench/routing.py --shapes 1280/36 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --variants --variant-configs "$V" --out $R/call1280.json > $R/call1280.log 2>&1
grep "^| 1280" $R/call1280.md; pack
timeout 330 python3 -m pytest tests/routing/test_triton_cuda.py -k "partial_other_backward or route_fp32 or partial_fp32 or partial_bf16 or two_phase" -q -p no:cacheprovider > $R/tests1.log 2>&1; tail -n 3 $R/tests1.log; pack
