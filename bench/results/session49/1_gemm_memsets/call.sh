#!/usr/bin/env bash
# session 49 call 1: the memsets cuBLAS runs before the step's matrix products in a CUDA
# graph (bench/gemm_memsets.py, new), per BLAS library and workspace setting, one process
# each; then the 350M baseline step with cuBLASLt preferred against the default,
# alternating processes.
# run: C=<commit> OUT=$OUT bash bench/results/session49/1_gemm_memsets/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
micro() {  # tag preset [env ...]
  local tag=$1 preset=$2; shift 2
  env "$@" timeout 120 python3 bench/gemm_memsets.py --preset $preset --out $R/memsets_$tag.json > $R/memsets_$tag.log 2>&1
  echo "rc=$? $tag $*"; tail -n 5 $R/memsets_$tag.log; pack
}
micro 350m paper-350m
micro 350m_ws0 paper-350m CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0
micro 100m paper-100m
micro 1b paper-1b
step() {  # tag prefer_lt preset methods steps limit
  TORCH_BLAS_PREFER_CUBLASLT=$2 timeout $6 python3 -m mhar bench step --preset $3 --methods $4 --steps $5 \
    --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  echo "rc=$? $1 prefer_cublaslt=$2"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 350m_lt_a 1 paper-350m baseline 10 150
step 350m_a 0 paper-350m baseline 10 150
