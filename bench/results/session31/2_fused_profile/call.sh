#!/usr/bin/env bash
# session 31 call 2: why fused projections were slower at 350M and 1B (call 1). The 350M
# baseline's profile with them off and on (bench/profile_step.py), then the 350M step with
# only the attention's or only the MLP's fused. 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session31/2_fused_profile/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
profile() {  # $1 fused setting
  timeout 110 python3 bench/profile_step.py --preset paper-350m --methods baseline --fused-projections $1 \
    --out $R > $R/profile_$1.log 2>&1
  echo "profile $1 at $(( $(date +%s) - t0 )) s:"; sed -n '/by kind/,/total/p' $R/profile_paper-350m_baseline_regions*$1*.txt $R/profile_paper-350m_baseline_regions.txt 2>/dev/null | head -24; pack
}
bench() {  # $1 tag, $2 preset, $3 methods, $4 fused setting, $5 limit s
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    --fused-projections $4 > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
profile off
profile on
bench 350m_attention paper-350m baseline attention 90
bench 350m_mlp paper-350m baseline mlp 90
