#!/usr/bin/env bash
# Session 63, call 1: FlashAttention-4's kernels against cuDNN's, one layer's attention
# forward + backward at the paper's shapes (bench/attention_bench.py, with FA4's output and
# gradients against SDPA's), then the baseline's training step with each (`mhar bench step`,
# baseline and baseline+attention_kernel=fa4 in one process per preset, 30 timed steps, graphed).
# run (carry .whl/fa4a; BUDGET: the seconds the call may take, 585 by default): C=<commit> OUT=$OUT bash bench/results/session63/1_fa4_bench/call.sh
# As run this session (README.md, calls 1-3) it carried .whl/fa4a alone, so FA4's kernels could not run:
# they need the runtime library in .whl/fa4b, which a second call on the warm machine brings.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
source "$(dirname "$0")/../fa4_site.sh" 2>&1 | tee $R/site.log
source "$(dirname "$0")/../fa4_site.sh" > /dev/null 2>&1  # the exports, in this shell
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
pack() { tar czf $OUT/r.tar.gz -C $OUT r; }
timeout 90 python3 -c "import flash_attn.cute.interface as i; print('flash-attn-4 imports')" 2>&1 | tail -8 | tee $R/import.log
timeout $(( ${BUDGET:-585} < 300 ? ${BUDGET:-585} - 30 : 240 )) python3 bench/attention_bench.py --backends auto,fa4 --out $R/attention.json > $R/attention.log 2>&1
echo "attention rc=$? at ${SECONDS}s"; grep "^|" $R/attention.log; grep -h "max_abs" $R/attention.log | cut -c1-300
grep -h "Error\|error" $R/attention.log | tail -5; pack
for p in 350m:150 1b:150 100m:0; do
  size=${p%:*}; limit=${p#*:}; left=$((${BUDGET:-585} - SECONDS))
  [ $limit = 0 ] || [ $limit -gt $left ] && limit=$left
  [ $limit -lt 60 ] && { echo "$size: no time left"; continue; }
  timeout $limit python3 -m mhar bench step --preset paper-$size --methods baseline,baseline+attention_kernel=fa4 \
    --steps 30 --warmup 3 --out $R --tag $size > $R/step_$size.log 2>&1
  echo "rc=$? $size at ${SECONDS}s"; grep -h "| paper" $R/step_$size.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png; pack
done
