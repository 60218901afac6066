#!/usr/bin/env bash
# session 13 call 1: one-pass and phase-2 kernels with (heads, chunks, lanes) tiles (new, src/) against the code before (ab_old/old_src): per call replayed, the whole step at 1280/73; GPU tests of the per-query kernels
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for v in old new; do
  if [ $v = old ]; then P=$PWD/ab_old/old_src; else P=$PWD/src; fi
  PYTHONPATH=$P timeout 110 python3 bench/routing.py --shapes 512/12,1024/24,1280/36 --heads 1,8 --no-eager --no-compiled --no-step --no-peers --graph-replay --out $R/call_$v.json > $R/call_$v.log 2>&1
  grep "^| [0-9]" $R/call_$v.log | head -20; pack
done
for v in old new; do
  if [ $v = old ]; then P=$PWD/ab_old/old_src; else P=$PWD/src; fi
  PYTHONPATH=$P timeout 100 python3 bench/routing.py --step-only --shapes 1280/36 --heads 1,8 --out $R/ws1280_$v.json > $R/ws1280_$v.log 2>&1
  grep "^| 1280/73" $R/ws1280_$v.log; pack
done
PYTHONPATH=$PWD/src timeout 170 python3 -m pytest tests/routing/test_triton_cuda.py -k "route_bf16 or fused_phase_two or one_program or deterministic or other_tile_configs" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
