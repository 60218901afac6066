#!/usr/bin/env bash
# session 31 call 7: where the MLP's fused projections lose (call 3: slower in both layouts).
# The 350M baseline's profile with only the MLP's fused (rows interleaved) and off, at
# e742ad3's code: `git archive e742ad3 src bench/profile_step.py` unpacked in .old/ (carried).
# run: C=e742ad3 OUT=$OUT bash bench/results/session31/7_interleaved_profile/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/.old/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
for f in mlp off; do
  timeout 75 python3 .old/bench/profile_step.py --preset paper-350m --methods baseline --fused-projections $f \
    --out $R > $R/profile_$f.log 2>&1
  echo "$f:"; sed -n "/by kind/,/total/p" $R/profile_paper-350m_baseline_regions_fused-$f.txt; pack
done
