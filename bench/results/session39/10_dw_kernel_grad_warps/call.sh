#!/usr/bin/env bash
# session 39 call 10: (1) one chunk's phase-2 backward at 1024 with 8 heads, per read
# (today) against deferred (r dz out and dw as triton products, "pending_dw": 3; dw held
# per program, 1; without dw, 0, a diagnostic); (2) the GPU tests of the deferred path;
# (3) the 350M step with the fastest deferred variant (pick.py) and as built, one process
# each; (4) phase 1's fused COEF pass (coef_grads) with more warps per program.
# run: C=<commit> OUT=$OUT bash bench/results/session39/10_dw_kernel_grad_warps/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session39/10_dw_kernel_grad_warps
sw() { echo "\"$1/$2w/$3 dw$4 t$5 p$6\": {\"pending_elems\": $(( $1 * 1024 )), \"pending_warps\": $2, \"pending_progs_per_sm\": $3, \"pending_dw\": $4, \"pending_dw_tokens\": $5, \"pending_dw_progs_per_sm\": $6}"; }
SW="{$(sw 4 8 2 0 64 4), $(sw 4 8 2 3 64 4), $(sw 4 4 2 3 64 4), $(sw 2 4 4 3 64 4), $(sw 8 8 1 3 64 4), $(sw 4 8 2 3 128 4), $(sw 4 8 2 3 64 8), $(sw 2 8 2 1 64 4)}"
echo "$SW" > $R/sweep.json
timeout 150 python3 bench/phase2_deferred.py --d 1024 --heads 8 --tokens 16384 --sites 8 --sweep "$SW" > $R/chunk_1024.md 2>&1
grep -v Warn $R/chunk_1024.md; pack
python3 $D/pick.py $R/chunk_1024.md $R/sweep.json $R/deferred.json
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "test_phase2_deferred or test_coef_grads" > $R/tests.log 2>&1
tail -n 8 $R/tests.log | cut -c1-300; pack
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md | sort -u; tail -n 2 $R/step_$1_$2.log | cut -c1-300; rm -f $R/*.png; pack
}
step 350m deferred $R/deferred.json baseline,mhar 130
step 350m built "" baseline,mhar 130
timeout 120 python3 bench/phase1_call.py --direct-rows --d 1024 --n 9,41 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_grad.json > $R/grad_1024.md 2>&1; grep "^|" $R/grad_1024.md | grep -v -- "---"; pack
