#!/usr/bin/env bash
# session 44 call 7 (run inline at b60454b on one H200; the command as given to the device):
mkdir -p $OUT/r && PYTHONPATH=$PWD/src timeout 200 python3 -m pytest -q -p no:cacheprovider \
  tests/routing/test_triton_cuda.py -k "gradient_sink or tokens_per_step" > $OUT/r/gpu_tests_sink.log 2>&1
echo rc $?; tail -3 $OUT/r/gpu_tests_sink.log
