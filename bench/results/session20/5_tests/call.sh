#!/usr/bin/env bash
# session 20 call 5: the GPU routing tests that run phase 1's product kernels (as shipped)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 560 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "as_products or one_head_per_program or partial or two_phase or phase_one_rows or sink" > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
