#!/usr/bin/env bash
# Re-measure issues 5 and 6 on one H200 in a single device call (keep the parts' time
# limits under the call's 600 s; runs A-F of session 5 used it): the CUDA routing and graph tests,
# the routing benchmark (H = 1 and 8, peers last, whole step), and the step benchmark at
# the three paper sizes. Everything lands in $OUT/suite/ and is packed into
# $OUT/suite.tar.gz, because the device tool returns at most 8 files.
# Usage (repository root, device machine): MHAR_COMMIT=<sha> bash bench/h200_suite.sh
# Time limits per part (seconds): T_TESTS, T_ROUTING, T_HOST (bench/host_overhead.py; off by
# default), T_HYPER (bench/hyper_mix.py; off), T_OPT (bench/optimizer_bench.py; off), T_STEP
# (per preset); 0 skips a part. TEST_K selects CUDA tests (pytest -k);
# ROUTING_ARGS adds options to bench/routing.py (e.g. "--no-peers --step-only").
# PRESETS and METHODS choose the step benchmark's rows (METHOD@two-phase sets a schedule);
# PRESETS_Q with T_STEPQ re-runs METHODS_Q with the phase-1 kernel config Q_CONFIG (JSON).
# PHASE1_PICKS=1 runs the step with bench/routing.py's --write-phase1-config picks.
# PRESETS_HYPER with T_STEPH runs baseline and hyper again with the reference hyper glue.
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1 MHAR_COMMIT=${MHAR_COMMIT:-unknown}
OUT=${OUT:-bench/results/suite_local}
R="$OUT/suite"
mkdir -p "$R"
python3 -m pip install -q --no-deps .whl/*.whl > "$R/pip.log" 2>&1  # the peers, when carried
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader > "$R/gpu.txt" 2>&1

part() { [ "${1:-0}" != 0 ]; }
part "${T_TESTS:-80}" && timeout "${T_TESTS:-80}" python3 -m pytest tests/routing/test_triton_cuda.py tests/train/test_cuda_graphs.py \
  tests/core/test_hyper_kernels.py -q -p no:cacheprovider ${TEST_K:+-k "$TEST_K"} \
  > "$R/routing_gpu_tests.log" 2>&1
part "${T_ROUTING:-200}" && timeout "${T_ROUTING:-200}" python3 bench/routing.py --heads 1,8 --no-eager --no-compiled ${ROUTING_ARGS:-} \
  --out "$R/routing_$MHAR_COMMIT.json" > "$R/routing.log" 2>&1
part "${T_HOST:-0}" && timeout "${T_HOST:-0}" python3 bench/host_overhead.py --out "$R/host" > "$R/host.log" 2>&1
# the hyper-connection glue per sublayer (reference, compiled pointwise, Triton kernels) and
# the optimiser phase's parts (both off by default)
part "${T_HYPER:-0}" && timeout "${T_HYPER:-0}" python3 bench/hyper_mix.py > "$R/hyper_mix.log" 2>&1
part "${T_OPT:-0}" && timeout "${T_OPT:-0}" python3 bench/optimizer_bench.py > "$R/optimizer_bench.log" 2>&1
# PHASE1_PICKS=1: the step runs with the routing benchmark's fastest phase-1 backward per
# width (ROUTING_ARGS needs --write-phase1-config "$R/phase1_picks.json")
[ -n "${PHASE1_PICKS:-}" ] && [ -f "$R/phase1_picks.json" ] && export MHAR_ROUTING_CONFIG="$R/phase1_picks.json"
for p in ${PRESETS:-paper-100m paper-350m paper-1b}; do
  part "${T_STEP:-100}" && timeout "${T_STEP:-100}" python3 -m mhar bench step --preset "$p" \
    --methods "${METHODS:-baseline,attnres,mhar,mhar-block}" \
    --steps 5 --warmup 3 --out "$R" --tag "$p" > "$R/step_$p.log" 2>&1
done

# the methods again with another phase-1 kernel config Q_CONFIG (JSON for
# MHAR_ROUTING_CONFIG, e.g. {"*": {"bwd_twopass": false}}), tagged Q_TAG
echo "${Q_CONFIG:-{\}}" > "$R/phase1.json"
for p in ${PRESETS_Q:-}; do
  part "${T_STEPQ:-0}" && MHAR_ROUTING_CONFIG="$R/phase1.json" timeout "${T_STEPQ:-0}" python3 -m mhar bench step \
    --preset "$p" --methods "${METHODS_Q:-baseline,mhar@two-phase,mhar-block@two-phase}" \
    --steps 5 --warmup 3 --out "$R" --tag "$p-${Q_TAG:-q}" > "$R/step_$p-${Q_TAG:-q}.log" 2>&1
done

# hyper-connections with the reference glue (MHAR_HYPER_BACKEND=reference; the Triton kernels are the
# default on CUDA), tagged PRESET-hyper-reference: compare with the same preset's hyper row above
# (each run has its own baseline)
for p in ${PRESETS_HYPER:-}; do
  part "${T_STEPH:-0}" && MHAR_HYPER_BACKEND=reference timeout "${T_STEPH:-0}" python3 -m mhar bench step --preset "$p" \
    --methods baseline,hyper --steps 5 --warmup 3 --out "$R" --tag "$p-hyper-reference" > "$R/step_$p-hyper-reference.log" 2>&1
done

tar czf "$OUT/suite.tar.gz" -C "$OUT" suite
tail -n 1 "$R/routing_gpu_tests.log" 2>/dev/null
grep -hE "^\| [0-9]+/" "$R"/routing_*.md 2>/dev/null | cut -c1-140
grep -h "^| [0-9]" "$R/host.log" "$R/hyper_mix.log" 2>/dev/null
grep -h "^| paper" "$R/optimizer_bench.log" 2>/dev/null
grep -h "| paper" "$R"/step_*.md 2>/dev/null
