#!/usr/bin/env bash
# session 44 call 4 (run inline at 7f16599 on one H200; the command as given to the device):
mkdir -p $OUT/r && PYTHONPATH=$PWD/src timeout 200 python3 -m pytest -q -p no:cacheprovider \
  tests/routing/test_triton_cuda.py -k "more_tokens" 2>&1 | tee $OUT/r/gpu_tests_more_tokens.log | tail -5
