#!/usr/bin/env bash
# Every test file with GPU tests, in one device call: the tests are split over parallel
# pytest processes (shards), each verbose, each shard's log written as it runs and $OUT/r
# packed into one archive (a call returns only a few files). Then the failed tests run
# again in one process, to tell a real failure from one of sharing the GPU.
# Usage (repository root, device machine):
#   C=<commit> OUT=$OUT bash bench/gpu_tests.sh
# FILES overrides the list; SHARDS the number of processes (default 6); WAVE_S each shard's
# time limit (default 430 s); END_S when the rerun must end (default 560 s into the call).
# Compiling Triton kernels is most of the time and runs on the host's cores: each process
# keeps to two threads (eight processes with 16 threads each on 16 cores ran 50x slower
# than a serial run, session 58), and one serial run of test_triton_cuda.py took 535 s
# with a cold Triton cache (session 27). Six shards ran session 59's 339 tests in 396 s.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=${C:-unknown} PYTHONPATH=$PWD/src OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
N=${SHARDS:-6}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.csv
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" \
  | tee $R/versions.txt
FILES=${FILES:-"tests/routing/test_triton_cuda.py tests/core/test_adamw_kernel.py tests/core/test_fused_ce.py
  tests/core/test_hyper_kernels.py tests/core/test_gpu_peak.py tests/core/test_streams.py
  tests/train/test_activation_checkpointing.py tests/train/test_bench_step.py tests/train/test_cuda_graphs.py
  tests/train/test_compare_cli.py tests/train/test_distributed_cuda.py tests/eval/test_scoring.py
  tests/eval/test_chance.py"}
python3 -m pytest --collect-only -q -p no:cacheprovider $FILES 2>&1 | grep '::' > $R/ids.txt
echo "$(wc -l < $R/ids.txt) tests in $N shards"
awk -v n=$N -v r=$R '{print > sprintf("%s/shard%d.txt", r, NR % n)}' $R/ids.txt
run_ids() {  # run_ids IDS_FILE LOG JUNIT: pytest on the node ids listed in a file
  python3 - "$1" "$3" > "$2" 2>&1 <<'PY'
import sys, pytest
ids = open(sys.argv[1]).read().splitlines()
sys.exit(pytest.main(["-v", "-p", "no:cacheprovider", "-rfEs", f"--junitxml={sys.argv[2]}", *ids]))
PY
}
for k in $(seq 0 $((N - 1))); do
  ( timeout ${WAVE_S:-430} bash -c "$(declare -f run_ids); run_ids $R/shard$k.txt $R/shard$k.log $R/shard$k.xml"
    echo "shard $k exit $? at ${SECONDS}s" >> $R/exits.txt ) &
done
wait; cat $R/exits.txt; pack
for k in $(seq 0 $((N - 1))); do tail -1 $R/shard$k.log; done
for kind in PASSED FAILED SKIPPED ERROR; do  # from the -v lines: a shard cut by its limit wrote no XML
  echo "$kind $(grep -h "::.* $kind" $R/shard*.log | wc -l)"; done | tee $R/summary.txt
grep -h '::.* \(FAILED\|ERROR\)' $R/shard*.log | awk '{print $1}' | sort -u > $R/failed.txt
cat $R/failed.txt
if [ -s $R/failed.txt ]; then
  timeout $((${END_S:-560} - SECONDS)) bash -c "$(declare -f run_ids); run_ids $R/failed.txt $R/rerun.log $R/rerun.xml"
  echo "rerun exit $? at ${SECONDS}s"; tail -5 $R/rerun.log
fi
pack
