#!/usr/bin/env bash
# session 18 call 5 (run inline, not as a file): the routing GPU tests that go through
# phase 1 with the split forward and COEF pass on by default (KeyScales in the sink chain)
export MHAR_COMMIT=a6d0540 PYTHONPATH=$PWD/src; mkdir -p $OUT/r
timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "sink or two_phase or phase_one_rows or as_products" > $OUT/r/tests5.log 2>&1; tail -n 3 $OUT/r/tests5.log
