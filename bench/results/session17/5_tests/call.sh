#!/usr/bin/env bash
# session 17 call 5: the routing GPU tests of phase 1, the gather and the gradient sink at
# the commit that dropped the gather kernel's unused n_tok argument
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 170 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "phase_one or two_phase or sink or partial_bf16 or coef" > $R/tests.log 2>&1; tail -n 2 $R/tests.log
