#!/usr/bin/env bash
# session 21 call 5: the GPU tests of the paths this session changed, at the shipped code
# (the CUDA-graph tests, with the pointer tables made once per capture; the routing tests
# of phase 2's backward, which now writes the row's lse, of w kept from the forward, and
# of partial reads, one query included)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt
timeout 100 python3 -m pytest tests/train/test_cuda_graphs.py -q -x > $R/tests_graphs.log 2>&1; tail -n 1 $R/tests_graphs.log; pack
timeout 240 python3 -m pytest tests/routing/test_triton_cuda.py -q -k "deterministic or two_phase or fused_phase_two or phase_one_rows or gradient_sink or route_bf16 or partial" > $R/tests_routing.log 2>&1; tail -n 1 $R/tests_routing.log; pack
