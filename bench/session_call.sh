#!/usr/bin/env bash
# One device call of checks and step benchmarks, re-packed after every part so that a
# call cut at its time limit still returns what finished (the device tool returns at
# most 8 files). Usage (repository root, device machine):
#   MHAR_COMMIT=<sha> bash bench/session_call.sh "<pytest args>" "<preset>:<methods>[:<overrides>]" ...
# e.g. bash bench/session_call.sh "tests/train/test_cuda_graphs.py" "paper-350m:baseline,mhar-block" \
#        "paper-350m:baseline,hyper:stream.hyper_recompute=4"
# (a preset's second spec gets its own tag: PRESET-2, ...). Each part has a time limit of
# T_PART seconds (default 170).
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
OUT=${OUT:-bench/results/call_local}
R="$OUT/call"
mkdir -p "$R"
pack() { tar czf "$OUT/call.tar.gz" -C "$OUT" call; }
tests=$1; shift
if [ -n "$tests" ]; then
  timeout "${T_PART:-170}" python3 -m pytest $tests -q -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
  tail -n 1 "$R/gpu_tests.log"; pack
fi
declare -A seen
for spec in "$@"; do
  IFS=: read -r preset methods overrides <<< "$spec"
  seen[$preset]=$(( ${seen[$preset]:-0} + 1 ))
  tag=$preset; [ "${seen[$preset]}" -gt 1 ] && tag="$preset-${seen[$preset]}"
  # shellcheck disable=SC2086  # the overrides are separate words
  timeout "${T_PART:-170}" python3 -m mhar bench step --preset "$preset" --methods "$methods" \
    --steps 5 --warmup 3 --out "$R" --tag "$tag" ${overrides//,/ } > "$R/step_$tag.log" 2>&1
  grep -h "| paper" "$R/step_$tag.md" 2>/dev/null; pack
done
