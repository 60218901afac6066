# run from the repository root on the device machine: C=<commit> OUT=$OUT bash bench/results/session27/1_gpu_tests/call.sh
FILES="tests/train/test_activation_checkpointing.py tests/train/test_cuda_graphs.py" T_FILE=280 bash bench/gpu_tests.sh
