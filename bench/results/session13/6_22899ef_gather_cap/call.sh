#!/usr/bin/env bash
# session 13 call 6 (22899ef): the whole step at 1280/73 with the gather capped at 96 registers; per call at 1280/73 with fewer persistent backward programs; the CUDA tests not run on this session's kernels yet
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=22899ef
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 70 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 '{"": null, "gather 96 registers": {"gather_maxnreg": 96}}' --out $R/ws1280.json > $R/ws1280.log 2>&1
grep -h "whole step" $R/ws1280.log; pack
V='{"bwd 12 per SM": {"bwd_progs_per_sm": 12}, "bwd 8 per SM": {"bwd_progs_per_sm": 8}}'
timeout 60 python3 bench/routing.py --shapes 1280/36 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --variants --variant-configs "$V" --out $R/call.json > $R/call.log 2>&1
grep "^| 1280" $R/call.md; pack
timeout 110 python3 -m pytest tests/routing/test_triton_cuda.py tests/train/test_cuda_graphs.py -k "compile or checkpoint or no_source or matches or other_backward or replay" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
