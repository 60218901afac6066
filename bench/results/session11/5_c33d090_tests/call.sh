#!/usr/bin/env bash
# session 11 call 5: GPU tests of the phase-1 products after tf32x3 was removed from them
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
timeout 240 python3 -m pytest tests/routing/test_triton_cuda.py -k "products or one_program" -q -p no:cacheprovider -rf > $R/tests.log 2>&1; tail -n 4 $R/tests.log
