#!/usr/bin/env bash
# session 34 call 3: block routing's running sums read through their summary's sink entry
# (the reads' gradients of a running sum added in the backward kernel, where autograd
# added two bf16 tensors per in-block sublayer). GPU tests first; then the step, one
# process each, before (_old_src: d4570cc's src, untracked, carried for this call) and
# after, baseline and mhar-block (one-pass, 'auto') and mhar-block@two-phase, 30 steps.
# run: C=<commit> OUT=$OUT bash bench/results/session34/3_running_sums/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
PYTHONPATH=$PWD/src timeout 150 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  tests/train/test_cuda_graphs.py -k "gradient_sink or replay_matches_eager" > $R/tests.log 2>&1
tail -n 3 $R/tests.log; pack
step() {  # preset, which (old/new), methods
  PYTHONPATH=$PWD/$([ $2 = old ] && echo _old_src/src || echo src) timeout 170 python3 -m mhar bench step \
    --preset paper-$1 --methods $3 --steps 30 --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md; rm -f $R/*.png; pack
}
step 350m old baseline,mhar-block,mhar-block@two-phase
step 350m new baseline,mhar-block,mhar-block@two-phase
step 1b new baseline,mhar-block
step 1b old baseline,mhar-block
