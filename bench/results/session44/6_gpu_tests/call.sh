#!/usr/bin/env bash
# session 44 call 6: the GPU routing tests after the grid change (`_fwd_kernel` and
# `_key_scales_kernel` on one grid axis), as many as its limit allows, the ones call 3 ran
# last; then the CUDA-graph tests of routed models.
# run: C=<commit> OUT=$OUT bash bench/results/session44/6_gpu_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/train/test_cuda_graphs.py > $R/gpu_tests_graphs.log 2>&1
tail -2 $R/gpu_tests_graphs.log
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "not (more_tokens or route_fp32 or partial_fp32 or two_phase or fused_phase_two or key_scales)" > $R/gpu_tests.log 2>&1
echo "rc $?"; tail -3 $R/gpu_tests.log
