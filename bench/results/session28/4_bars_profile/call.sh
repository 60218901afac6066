#!/usr/bin/env bash
# session 28 call 4: the same code as call 3 at 1B (baseline and MHAR, the bar met by a
# hair before this session) and block MHAR at 350M, then the 100M baseline's kernels by
# kind under the profiler (are the weight casts gone? the one-pass CE kernel's time)
# run: C=<commit> OUT=$OUT bash bench/results/session28/4_bars_profile/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
step() {  # $1 tag, $2 limit s, the rest: bench step arguments
  local tag=$1 limit=$2; shift 2
  timeout $limit python3 -m mhar bench step --steps 30 --warmup 3 --out $R --tag $tag "$@" > $R/step_$tag.log 2>&1
  echo "$tag: rc $?"; grep -h "| paper" $R/step_$tag.md; rm -f $R/*.png; pack
}
step 1b 200 --preset paper-1b --methods baseline,mhar
step 350m_block 160 --preset paper-350m --methods baseline,mhar-block
timeout 120 python3 bench/profile_step.py --preset paper-100m --methods baseline --out $R > $R/profile_100m.log 2>&1
tail -n 12 $R/profile_100m.log | cut -c1-160; pack
