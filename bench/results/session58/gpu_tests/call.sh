#!/usr/bin/env bash
# Session 58: every GPU test file in one call, sharded over parallel pytest processes
# (compiling Triton kernels is most of their time and runs on the host's cores; one
# serial run of test_triton_cuda.py alone never finished within a call). Then the
# failed tests again, one process, to tell a real failure from one of sharing the GPU.
# run: C=<commit> OUT=$OUT bash bench/results/session58/gpu_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
N=${SHARDS:-8}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.csv
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" | tee $R/versions.txt
FILES=${FILES:-"tests/routing/test_triton_cuda.py tests/core/test_adamw_kernel.py tests/core/test_fused_ce.py
  tests/core/test_hyper_kernels.py tests/train/test_activation_checkpointing.py tests/train/test_bench_step.py
  tests/eval/test_scoring.py tests/eval/test_chance.py tests/core/test_streams.py tests/train/test_cuda_graphs.py"}
python3 -m pytest --collect-only -q -p no:cacheprovider $FILES 2>&1 | grep '::' > $R/ids.txt
echo "$(wc -l < $R/ids.txt) tests in $N shards"
awk -v n=$N -v r=$R '{print > sprintf("%s/shard%d.txt", r, NR % n)}' $R/ids.txt
run_ids() {  # run_ids IDS_FILE LOG JUNIT: pytest on the node ids listed in a file
  python3 - "$1" "$3" > "$2" 2>&1 <<'PY'
import sys, pytest
ids = open(sys.argv[1]).read().splitlines()
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rfEs", f"--junitxml={sys.argv[2]}", *ids]))
PY
}
for k in $(seq 0 $((N - 1))); do
  ( timeout ${WAVE_S:-400} bash -c "$(declare -f run_ids); run_ids $R/shard$k.txt $R/shard$k.log $R/shard$k.xml"
    echo "shard $k exit $? at ${SECONDS}s" >> $R/exits.txt ) &
done
wait; cat $R/exits.txt
for k in $(seq 0 $((N - 1))); do tail -1 $R/shard$k.log; done
python3 - $R <<'PY' > $R/summary.txt
import sys, glob, xml.etree.ElementTree as ET
counts = {"passed": 0, "failed": 0, "skipped": 0}
for f in sorted(glob.glob(f"{sys.argv[1]}/shard*.xml")):
    for case in ET.parse(f).iter("testcase"):
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        counts["failed" if kind in ("failure", "error") else kind] += 1
print(counts)
PY
grep -h '^FAILED \|^ERROR ' $R/shard*.log | sed 's/ - .*//' | awk '{print $2}' | sort -u > $R/failed.txt
cat $R/summary.txt; cat $R/failed.txt
if [ -s $R/failed.txt ]; then
  timeout $((560 - SECONDS)) bash -c "$(declare -f run_ids); run_ids $R/failed.txt $R/rerun.log $R/rerun.xml"
  echo "rerun exit $? at ${SECONDS}s"; tail -5 $R/rerun.log
fi
