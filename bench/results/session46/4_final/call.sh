#!/usr/bin/env bash
# session 46 call 4, the final code (two-phase full routing from d = 512, 1024's table
# entry at 512): the GPU routing tests at 512 and of the two-phase reads; then 100M with
# every method in one process at the bench's microbatch, and at the trainer's 64 x 2048.
# run: C=<commit> OUT=$OUT bash bench/results/session46/4_final/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 230 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "512 or two_phase or final_read" > $R/gpu_tests.log 2>&1
echo "tests rc=$?"; tail -n 4 $R/gpu_tests.log | cut -c1-300; pack
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_all paper-100m baseline,hyper,attnres,mhar,mhar-block 20 200
step 100m_b64 paper-100m baseline,attnres,mhar 10 140 --batch global
