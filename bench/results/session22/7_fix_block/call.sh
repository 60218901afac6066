#!/usr/bin/env bash
# session 22 call 7: call 6's three failures again with the interpreter fix and the test's
# GPU expectation; then block MHAR (8 heads) two-phase against its one-pass default, 30
# timed steps at 1B and 350M (baseline, mhar-block, mhar-block@two-phase; one process each)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/core/test_fused_ce.py::test_cases_under_interpreter \
  tests/core/test_fused_ce.py::test_loss_bench_cpu_smoke tests/train/test_bench_step.py::test_bench_step_writes_table_json_and_plot \
  > $R/tests_fixed.log 2>&1
tail -n 1 $R/tests_fixed.log
for p in 1b 350m; do
  timeout 125 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar-block,mhar-block@two-phase --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png
done
