#!/usr/bin/env bash
# session 47 call 3: hyper-connections' new default (stream.hyper_recompute=8): the GPU
# tests of the glue (kept and recomputed streams) and of the graphed trainer step, then
# the bench at the trainer presets' microbatches (--batch global: 64 x 2048 at 100M,
# 32 x 1024 at 350M); last, where 100M's two-phase MHAR step time goes
# (bench/profile_step.py, graphed; no profile since 100M went two-phase).
# run: C=<commit> OUT=$OUT bash bench/results/session47/3_hyper_default/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/core/test_hyper_kernels.py -k cuda \
  > $R/tests_hyper.log 2>&1; echo "rc=$? tests_hyper"; tail -2 $R/tests_hyper.log
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/train/test_cuda_graphs.py -k hyper \
  > $R/tests_graphs.log 2>&1; echo "rc=$? tests_graphs"; tail -2 $R/tests_graphs.log; pack
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_global paper-100m baseline,hyper 10 120 --batch global
step 350m_global paper-350m baseline,hyper 10 150 --batch global
timeout 170 python3 bench/profile_step.py --preset paper-100m --methods baseline,mhar --out $R \
  > $R/profile_100m.log 2>&1; echo "rc=$? profile"; tail -30 $R/profile_100m.log; pack
