#!/usr/bin/env bash
# session 17 call 3: the routing GPU tests at this commit; the gather with bf16 gradient
# rows under other launch configs (register cap 128 or none, 8 warps, blocks of 32
# sources), each in the whole step at 1280/73 with 8 heads, chunks of 8 and of 16, one
# process per chunk size (the variants side by side in it)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 280 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -p no:cacheprovider > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
P='{"": null, "cap 128": {"gather_maxnreg": 128}, "no cap": {"gather_maxnreg": null}, "8 warps": {"gather_warps": 8, "gather_maxnreg": null}, "32 sources": {"gather_sources": 32, "gather_maxnreg": null}}'
for S in 8 16; do
  timeout 130 python3 bench/routing.py --step-only --no-one-pass --shapes 1280/36 --heads 8 --chunk $S --phase1 "$P" --out $R/ws1280_s$S.json > $R/ws1280_s$S.log 2>&1
  grep -h "| two-phase" $R/ws1280_s$S.md | cut -c1-200; pack
done
