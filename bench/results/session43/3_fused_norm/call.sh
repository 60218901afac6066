#!/usr/bin/env bash
# session 43 call 3: the sublayers' pre-norms applied by the routing reads' kernels
# (routing.route / route_merge out_norm; the stream's fuse_norm, on by default). GPU
# tests of the kernels and of routed models under CUDA graphs, then the 350M step:
# mhar (fused) against mhar-unfused (unfused.py) side by side in one process.
# run: C=<commit> OUT=$OUT bash bench/results/session43/3_fused_norm/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session43/3_fused_norm
timeout 250 python3 $D/unfused.py --preset paper-350m --methods baseline,mhar,mhar-unfused,mhar,mhar-unfused \
  --steps 30 --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md; rm -f $R/*.png; pack
timeout 170 python3 -m pytest -v -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "out_norm or fused_norms or fused_phase_two or phase_one_rows or gradient_sink" > $R/gpu_tests.log 2>&1
tail -2 $R/gpu_tests.log; pack
timeout 150 python3 -m pytest -v -p no:cacheprovider tests/train/test_cuda_graphs.py > $R/gpu_tests_graphs.log 2>&1
tail -2 $R/gpu_tests_graphs.log; pack
