#!/usr/bin/env bash
# session 10 call 6: GPU tests of the trainer's queued update; the optimiser phase timed with the host ahead
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 95 python3 -m pytest tests/core/test_adamw_kernel.py tests/train/test_cuda_graphs.py -k "cuda_kernel or cuda_trainer or (trainer_with_cuda_graphs and mhar)" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
timeout 60 python3 bench/optimizer_bench.py --presets paper-350m > $R/opt.log 2>&1; grep "^| paper" $R/opt.log; pack
