#!/usr/bin/env bash
# Session 62: every file with GPU tests at one commit, after sessions 60-61's trainer changes
# (the multi-process trainer's compiled regions, Triton AdamW and graphed DDP; `fit`'s
# queued-ahead step). Session 59's sharded runner with a longer file list.
# run: C=<commit> OUT=$OUT bash bench/results/session62/1_gpu_tests/call.sh
FILES="tests/routing/test_triton_cuda.py tests/core/test_adamw_kernel.py tests/core/test_fused_ce.py
  tests/core/test_hyper_kernels.py tests/core/test_gpu_peak.py tests/train/test_activation_checkpointing.py
  tests/train/test_bench_step.py tests/train/test_compare_cli.py tests/eval/test_scoring.py tests/eval/test_chance.py
  tests/core/test_streams.py tests/train/test_cuda_graphs.py tests/train/test_distributed_cuda.py" \
  WAVE_S=${WAVE_S:-430} END_S=${END_S:-560} SHARDS=${SHARDS:-6} \
  exec bash "$(dirname "$0")/../../session59/1_gpu_tests/call.sh"
