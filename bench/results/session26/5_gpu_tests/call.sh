#!/usr/bin/env bash
# session 26 call 5: every GPU test at the final code, the first full run since op's
# merge_scales went on by default (session 25 ran only its own tests with it on)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py --durations=5 > $R/routing_cuda.log 2>&1
tail -n 3 $R/routing_cuda.log; pack
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/train/test_cuda_graphs.py tests/train/test_activation_checkpointing.py \
  tests/core/test_hyper_kernels.py tests/core/test_fused_ce.py tests/core/test_adamw_kernel.py --durations=5 > $R/other_cuda.log 2>&1
tail -n 3 $R/other_cuda.log; pack
