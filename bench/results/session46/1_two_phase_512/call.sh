#!/usr/bin/env bash
# session 46 call 1: full routing at d = 512 (100M), one-pass ('auto' today) against
# two-phase, whose final read now starts few gradient sums (session 45); speed at the
# bench's default microbatch (8 x 2048) and memory and speed at the trainer's (64 x 2048),
# where one-pass MHAR's peak was 1.045 x the baseline's.
# run: C=<commit> OUT=$OUT bash bench/results/session46/1_two_phase_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" > $R/versions.txt
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_b64 paper-100m baseline,mhar,mhar@two-phase 10 200 --batch global
step 100m_a paper-100m baseline,mhar,mhar@two-phase,attnres,attnres@two-phase 20 220
step 100m_b paper-100m baseline,mhar@two-phase,mhar 20 150
