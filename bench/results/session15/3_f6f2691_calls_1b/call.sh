#!/usr/bin/env bash
# session 15 call 3: per call at the three paper shapes, H = 1 and 8, with the peers (fla fused_attnres, liger attn_res, carried as wheels in .whl), replayed from CUDA graphs; the training step at 1B (baseline, mhar, mhar-block), graphed, with the bf16x3 gather
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps .whl/*.whl > $R/pip.log 2>&1
timeout 220 python3 bench/routing.py --heads 1,8 --no-eager --no-compiled --no-step --graph-replay --out $R/calls.json > $R/calls.log 2>&1
grep "^| [0-9]" $R/calls.md | cut -c1-200; pack
timeout 250 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar,mhar-block --steps 6 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/step_1b.png; pack
