#!/usr/bin/env bash
# session 14 call 4 (b3b1280): the whole step at 1280/73 and 1024/49 with phase 1's forward persistent (2 programs per SM asked, the default) and with one token per program; GPU tests of the CUDA graphs (training steps with the routing kernels)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$NEW
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for s in 1280/36 1024/24; do
  timeout 110 python3 bench/routing.py --step-only --shapes $s --heads 8 --phase1 '{"": null, "fwd one token per program": {"fwd_dot_progs_per_sm": 100000}}' --out $R/ws${s%/*}.json > $R/ws${s%/*}.log 2>&1
  grep -h "H=8 two-phase" $R/ws${s%/*}.log; pack
done
timeout 150 python3 -m pytest tests/train/test_cuda_graphs.py -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
