# run from the repository root on the device machine: C=<commit> OUT=$OUT bash bench/results/session27/2_gpu_tests/call.sh
FILES="tests/train/test_activation_checkpointing.py tests/train/test_cuda_graphs.py tests/core/test_fused_ce.py tests/core/test_adamw_kernel.py tests/core/test_hyper_kernels.py tests/train/test_bench_step.py" T_FILE=200 bash bench/gpu_tests.sh
