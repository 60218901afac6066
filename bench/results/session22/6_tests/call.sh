#!/usr/bin/env bash
# session 22 call 6: the rest of the GPU tests at the session's code: the routing tests
# not run in call 2, then every other file with CUDA tests (the graph tests ran in call 3)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 330 python3 -m pytest tests/routing/test_triton_cuda.py -q -rs -p no:cacheprovider --durations=5 \
  -k "not (as_products or one_head_per_program or two_phase or phase_one_rows or gradient_sink)" > $R/tests_routing_rest.log 2>&1
tail -n 1 $R/tests_routing_rest.log
timeout 190 python3 -m pytest tests/core/test_hyper_kernels.py tests/core/test_fused_ce.py tests/core/test_adamw_kernel.py \
  tests/train/test_activation_checkpointing.py tests/train/test_bench_step.py -q -rs -p no:cacheprovider --durations=5 > $R/tests_other.log 2>&1
tail -n 1 $R/tests_other.log
