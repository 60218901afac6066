#!/usr/bin/env bash
# session 47 call 5: hyper-connections' recompute segments halving down to a last one of
# at most 6 sublayers (the new default, stream.hyper_recompute=6: 12, 6, 6 at 100M;
# 24, 12, 6, 6 at 350M; 36, 18, 9, 4, 5 at 1B), against uniform segments (calls 1-4:
# 1.057-1.117 x the baseline's memory at 100M's 64 x 2048): the glue's GPU tests, then
# every size at the bench's and the trainer's microbatches, one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session47/5_hyper_halving/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/core/test_hyper_kernels.py -k "cuda or starts" \
  > $R/tests_hyper.log 2>&1; echo "rc=$? tests_hyper"; tail -1 $R/tests_hyper.log
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_global paper-100m baseline,hyper 5 100 --batch global
step 100m paper-100m baseline,hyper 20 100
step 350m_global paper-350m baseline,hyper 5 120 --batch global
step 350m paper-350m baseline,hyper 10 120
step 1b paper-1b baseline,hyper 5 160
