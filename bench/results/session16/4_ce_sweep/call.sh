#!/usr/bin/env bash
# session 16 call 4: the cross-entropy kernel's launch sweep on one 8192 x 151,936 bf16 chunk, with persistent programs and the reversed second pass (bench/loss_bench.py), and the fused loss at the three widths
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 200 python3 bench/loss_bench.py --methods fused,matmuls-only --fused-chunks 4096 --out $R/loss.json > $R/loss.log 2>&1
grep "^|" $R/loss.log; pack
