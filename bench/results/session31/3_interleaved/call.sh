#!/usr/bin/env bash
# session 31 call 3: gate/up fused with their rows interleaved (call 2's profile: the
# concatenated layout made the SwiGLU backward load its inputs twice). The baseline step
# with the projections off / on / only the attention's / only the MLP's, off again at the
# end (the process-order effect): 350M, then 1B. 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session31/3_interleaved/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
bench() {  # $1 tag, $2 preset, $3 methods, $4 fused setting, $5 limit s
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    --fused-projections $4 > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s: $(grep -h '| paper' $R/step_$1.md | cut -d'|' -f5-7)"; rm -f $R/*.png; pack
}
bench 350m_off paper-350m baseline off 70
bench 350m_on paper-350m baseline on 70
bench 350m_attention paper-350m baseline attention 70
bench 350m_mlp paper-350m baseline mlp 70
bench 350m_off2 paper-350m baseline off 70
bench 1b_off paper-1b baseline off 80
bench 1b_on paper-1b baseline on 80
bench 1b_mlp paper-1b baseline mlp 80
bench 1b_off2 paper-1b baseline off 80
