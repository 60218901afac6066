# run from the repository root on the device machine: C=<commit> OUT=$OUT bash bench/results/session27/3_gpu_tests/call.sh
FILES="tests/routing/test_triton_cuda.py" T_FILE=570 bash bench/gpu_tests.sh
