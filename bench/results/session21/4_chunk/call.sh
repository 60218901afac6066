#!/usr/bin/env bash
# session 21 call 4: the two-phase chunk in the training step now (session 17 had 16
# 0.9% faster than 8 in the 1B step, with the kernels of then): 30 timed steps of 1B MHAR
# with chunks of 8, 12 and 16 (separate processes), the baseline once; then 350M with
# 8 and 16.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
step() {  # preset methods chunk tag
  timeout 150 python3 -m mhar bench step --preset paper-$1 --methods $2 --chunk $3 --steps 30 --warmup 3 --out $R --tag $4 > $R/step_$4.log 2>&1
  echo "chunk $3: $(grep -h '| paper' $R/step_$4.md | tr '\n' ' ')"; rm -f $R/*.png; pack
}
step 1b baseline,mhar 8 1b_c8
step 1b mhar 16 1b_c16
step 1b mhar 12 1b_c12
step 1b mhar 8 1b_c8b
step 350m baseline,mhar 8 350m_c8
step 350m mhar 16 350m_c16
