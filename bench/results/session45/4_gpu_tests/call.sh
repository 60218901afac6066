#!/usr/bin/env bash
# session 45 call 4: GPU tests. The new model-level test of the final read's own phase 1
# (against one-pass, and when the gradient sums start); the 5 routing tests call 1's limit
# cut (test_partial_other_backward[9-1280-1-3-*]); the CUDA-graph replay tests, whose
# routed models now take the final read two-phase.
# run: C=<commit> OUT=$OUT bash bench/results/session45/4_gpu_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -v -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "model_two_phase_final_read or (partial_other_backward and 9-1280-1-3)" > $R/gpu_tests_routing.log 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed" $R/gpu_tests_routing.log | tail -8; pack
timeout 230 python3 -m pytest -v -p no:cacheprovider tests/train/test_cuda_graphs.py -k replay > $R/gpu_tests_graphs.log 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed" $R/gpu_tests_graphs.log | tail -12; pack
