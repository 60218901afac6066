#!/usr/bin/env bash
# session 15 call 2: per call at 1280/73 with the one-query backward capped at 168 registers (12 warps per SM, spills) against 224 (the new default at 8 heads); the whole step at 1280/73 with the summing backward capped at 168; the rest of the GPU routing tests and the CUDA-graph tests
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
V='{"no cap": {"bwd_maxnreg": null}, "bwd 168": {"bwd_maxnreg": 168}, "bwd 168, 12 per SM": {"bwd_maxnreg": 168, "bwd_progs_per_sm": 12}, "bwd 168, 24 per SM": {"bwd_maxnreg": 168, "bwd_progs_per_sm": 24}}'
timeout 120 python3 bench/routing.py --shapes 1280/36 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --variants --variant-configs "$V" --out $R/call1280.json > $R/call1280.log 2>&1
grep "^| 1280" $R/call1280.md; pack
timeout 170 python3 bench/routing.py --step-only --shapes 1280/36 --heads 1,8 --phase1 '{"": null, "sum 168": {"bwd_sum_maxnreg": 168}, "sum 168, 12 per SM": {"bwd_sum_maxnreg": 168, "bwd_progs_per_sm": 12}}' --out $R/ws1280.json > $R/ws1280.log 2>&1
grep -h "^| 1280/73" $R/ws1280.md; pack
timeout 230 python3 -m pytest tests/routing/test_triton_cuda.py tests/train/test_cuda_graphs.py -k "not (partial_other_backward or route_fp32 or partial_fp32 or partial_bf16 or two_phase)" -q -p no:cacheprovider > $R/tests2.log 2>&1; tail -n 3 $R/tests2.log; pack
