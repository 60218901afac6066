#!/usr/bin/env bash
# Session 51, staged for the next session with a GPU (not run: no device was lent in
# session 51). At 512 with 8 heads (100M), offline on triton 3.6 (bench/compile_sm90.py's
# resident_per_sm, ../offline/), three phase-1 launches hold more programs an SM than the
# config asks, without spilling:
# - the fused COEF pass: 214 registers with 64-lane pieces (8 an SM), but 168 uncapped with
#   16-lane pieces, and 168 with no stack when capped at 64 or 32 lanes (12 an SM);
# - the forward, a head per program: 128 registers with no stack at a cap of 128 (16 an SM,
#   against 12 at the cap of 168);
# - the COEF pass of reads of few sources: 139-188 registers, 168 capped with no stack (12).
# At 1024 none of these fit more (the fused pass spills at 168: session 42). One read at 9
# / 17 sources (bench/phase1_call.py --direct-rows, 8 queries, 8 heads, 16,384 tokens) over
# sweep_512.json; then, when the best is at most 0.97 of as built in routing-kernel time,
# the 100M step with it against as built in alternating processes (pick, built, pick).
# Time: the sweep at most 150 s, each step process at most 130 s (the limit is 600). The
# settings change only programs per SM, register caps and lane pieces, none of the kernels'
# arithmetic but the pieces' order of adds, so no GPU test runs here; test_coef_grads
# already covers the fused pass in 16-lane pieces (1024, capped), 32 (1280) and 64 (512, 1024).
# run: C=<commit> OUT=$OUT bash bench/results/session51/next_1_residency_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session51/next_1_residency_512
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 bench/phase1_call.py --direct-rows --d 512 --n 9,17 --queries 8 --heads 8 --iters 20 \
  --sweep $D/sweep_512.json > $R/sweep_512.md 2>&1; grep "^|" $R/sweep_512.md | grep -v -- "---"; pack
step() {  # tag [config]
  timeout 130 env ${2:+MHAR_ROUTING_CONFIG=$2} python3 -m mhar bench step --preset paper-100m \
    --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
if python3 bench/pick_config.py $R/sweep_512.md $D/sweep_512.json "512,1" 0.97 $R/pick_512.json; then
  cat $R/pick_512.json; step 100m_pick1 $R/pick_512.json; step 100m_built; step 100m_pick2 $R/pick_512.json
fi
