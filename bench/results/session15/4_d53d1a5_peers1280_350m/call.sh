#!/usr/bin/env bash
# session 15 call 4: per call at 1280/73 with one head: ours, the torch.compile'd reference, fla fused_attnres and liger attn_res (run 3 was cut during liger there), replayed; the 350M training step (baseline, mhar, mhar-block), graphed
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps .whl/*.whl > $R/pip.log 2>&1
timeout 300 python3 bench/routing.py --shapes 1280/36 --heads 1 --no-eager --compiled-keys 1280/73/H1 --no-step --graph-replay --out $R/calls1280.json > $R/calls1280.log 2>&1
tail -n 6 $R/calls1280.log; pack
timeout 220 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar,mhar-block --steps 6 --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md; rm -f $R/step_350m.png; pack
