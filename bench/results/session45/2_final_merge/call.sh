#!/usr/bin/env bash
# session 45 call 2: the final read as a merge into the last chunk (full routing,
# two-phase). (a) 1B at its trainer microbatch (32 x 1024), where MHAR's peak was 1.053 x
# baseline: the final read's backward started all 73 gradient sums with every activation
# held (call 1). (b) 350M at the bench's default, the change against the code before it
# (final_merge.diff reversed into a copy of src/), alternating processes.
# run: C=<commit> OUT=$OUT bash bench/results/session45/2_final_merge/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
HERE=bench/results/session45/2_final_merge
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
OLD=/tmp/before; mkdir -p $OLD && cp -r src $OLD/
cd $OLD && { git apply -R -p1 $OLDPWD/$HERE/final_merge.diff || patch -R -p1 < $OLDPWD/$HERE/final_merge.diff; }; cd - >/dev/null
grep -c "joins the last chunk" src/mhar/streams/routed.py $OLD/src/mhar/streams/routed.py | tee $R/versions.txt
step() {  # tag srcdir preset methods steps limit [bench args]
  PYTHONPATH=$2 timeout $6 python3 -m mhar bench step --preset $3 --methods $4 --steps $5 --warmup 3 \
    --out $R --tag $1 "${@:7}" > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 1b_b32_new $PWD/src paper-1b baseline,mhar 10 210 --batch global
step 350m_new_1 $PWD/src paper-350m baseline,mhar 20 125
step 350m_old_1 $OLD/src paper-350m baseline,mhar 20 125
step 350m_new_2 $PWD/src paper-350m baseline,mhar 20 125
