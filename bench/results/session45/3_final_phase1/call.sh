#!/usr/bin/env bash
# session 45 call 3: full routing's final read two-phase, with a phase 1 of its own read
# when the last chunk begins (call 2 made it a ninth row of the chunk's phase 1: 1% slower
# at 350M). (a) 1B at its trainer microbatch (32 x 1024), where MHAR's peak was 1.053 x
# baseline (call 1: the one-pass final read's backward started all 73 gradient sums with
# every activation held). (b) 350M and 100M at the bench's defaults, against the code
# before the change (final_phase1.diff reversed into a copy of src/), alternating processes.
# run: C=<commit> OUT=$OUT bash bench/results/session45/3_final_phase1/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
HERE=bench/results/session45/3_final_phase1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
OLD=/tmp/before; mkdir -p $OLD && cp -r src $OLD/
cd $OLD && { git apply -R -p1 $OLDPWD/$HERE/final_phase1.diff || patch -R -p1 < $OLDPWD/$HERE/final_phase1.diff; }; cd - >/dev/null
grep -c "final_row" src/mhar/streams/routed.py $OLD/src/mhar/streams/routed.py | tee $R/versions.txt
step() {  # tag srcdir preset methods steps limit [bench args]
  PYTHONPATH=$2 timeout $6 python3 -m mhar bench step --preset $3 --methods $4 --steps $5 --warmup 3 \
    --out $R --tag $1 "${@:7}" > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 1b_b32_new $PWD/src paper-1b baseline,mhar 10 150 --batch global
step 350m_new_1 $PWD/src paper-350m baseline,mhar 20 100
step 350m_old_1 $OLD/src paper-350m baseline,mhar 20 100
step 350m_new_2 $PWD/src paper-350m baseline,mhar 20 100
step 350m_old_2 $OLD/src paper-350m baseline,mhar 20 100
step 100m_new_1 $PWD/src paper-100m baseline,mhar 30 100
step 100m_old_1 $OLD/src paper-100m baseline,mhar 30 100
