#!/usr/bin/env bash
# session 30 call 2: where call 1's weight copies went. bench/profile_step.py of the 100M
# baseline with copies off and on (kernels by kind, every kernel in the .tsv), then the
# 1B step, baseline and mhar, copies off and on in alternate processes.
# run: C=<commit> OUT=$OUT bash bench/results/session30/2_copies_profile_1b/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
for c in off on; do
  timeout 100 python3 bench/profile_step.py --preset paper-100m --methods baseline --weight-copies $c --out $R \
    > $R/profile_100m_$c.log 2>&1
  echo "profile $c at $(( $(date +%s) - t0 )) s:"; tail -n 12 $R/profile_100m_$c.log; pack
done
bench() {  # $1 tag, $2 preset, $3 methods, $4 copies on/off, $5 limit s
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    --weight-copies $4 > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
bench 1b_off_1 paper-1b baseline,mhar off 170
bench 1b_on_1 paper-1b baseline,mhar on 170
