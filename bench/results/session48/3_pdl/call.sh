#!/usr/bin/env bash
# session 48 call 3: Inductor's programmatic dependent launch (TORCHINDUCTOR_ENABLE_PDL=1,
# off by default in torch 2.11: the compiled regions' Triton kernels may start while the
# kernel before them finishes) against the default, alternating processes; 100M (below the
# power cap at 8 x 2048, where the gaps between launches count) and 350M.
# run: C=<commit> OUT=$OUT bash bench/results/session48/3_pdl/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
python3 -c "import torch._inductor.config as c; print('enable_pdl in this torch:', hasattr(c.triton, 'enable_pdl'))"
step() {  # tag pdl preset methods steps limit
  TORCHINDUCTOR_ENABLE_PDL=$2 timeout $6 python3 -m mhar bench step --preset $3 --methods $4 --steps $5 \
    --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  echo "rc=$? $1 pdl=$2"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_a 0 paper-100m baseline,mhar 30 150
step 100m_pdl_a 1 paper-100m baseline,mhar 30 200
step 100m_b 0 paper-100m baseline,mhar 30 150
step 100m_pdl_b 1 paper-100m baseline,mhar 30 150
step 350m_pdl 1 paper-350m baseline,mhar 10 200
step 350m 0 paper-350m baseline,mhar 10 150
