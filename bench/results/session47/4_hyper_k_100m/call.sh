#!/usr/bin/env bash
# session 47 call 4: hyper-connections' memory at 100M's trainer microbatch (64 x 2048),
# where every 8th sublayer's streams measured 1.072 x the baseline's (call 3) against
# 1.029-1.033 elsewhere: every 4th, 6th and 12th, one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session47/4_hyper_k_100m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
for k in 4 6 12; do
  step 100m_global_k$k paper-100m baseline,hyper 5 120 --batch global stream.hyper_recompute=$k
done
