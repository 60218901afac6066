#!/usr/bin/env bash
# session 29 call 5: the routing sites' query / key-norm gradients summed over the
# kernels' per-program rows by a matrix-vector product (op._weight_grads) instead of
# torch's sum over the first dim and two products. (1) the two alone on (programs, 1, d)
# fp32 rows as the 100M and 1B backward writes them, and the product's error against an
# fp64 sum with TF32 allowed; (2) 1B and 100M, baseline and mhar in one process, new
# against old (old: _weight_grads patched back to the sum), one process each; (3) GPU
# routing tests, a subset
# run: C=<commit> OUT=$OUT bash bench/results/session29/5_weight_grads/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
timeout 60 python3 - > $R/micro.log 2>&1 <<'PY'
import torch, triton.testing as tt
from mhar.routing import op
torch.backends.cuda.matmul.allow_tf32 = True
for n, d in ((2112, 512), (2112, 1280), (1056, 1280)):
    parts = torch.randn(n, 1, d, device="cuda")
    q, g = torch.randn(1, d, device="cuda"), torch.randn(1, d, device="cuda")
    def old():
        dw = parts.sum(0)
        return dw * g, dw * q
    new = lambda: op._weight_grads(parts, q, g)
    want = parts.double().sum(0)
    err = ((new()[0].double() / g.double() - want).abs().max() / want.abs().max()).item()
    err_old = ((old()[0].double() / g.double() - want).abs().max() / want.abs().max()).item()
    t_old = tt.do_bench_cudagraph(old, rep=200); t_new = tt.do_bench_cudagraph(new, rep=200)
    print(f"({n}, 1, {d}): sum + 2 products {t_old * 1e3:.1f} us, mv + foreach {t_new * 1e3:.1f} us; "
          f"max error / max |sum|: {err:.1e} (sum: {err_old:.1e})")
PY
cat $R/micro.log; pack
OLD='from mhar.routing import op
def _old(dw_parts, queries, norm_weights):
    dw = dw_parts.sum(0)
    return (dw * norm_weights.float()).to(queries.dtype), (dw * queries.float()).to(norm_weights.dtype)
op._weight_grads = _old'
bench() {  # $1 tag, $2 preset, $3 limit s, $4 python run before the bench
  timeout $3 python3 -c "
import runpy, sys
$4
sys.argv = ['mhar', 'bench', 'step', '--preset', '$2', '--methods', 'baseline,mhar', '--steps', '30', '--warmup', '3', '--out', '$R', '--tag', '$1']
runpy.run_module('mhar', run_name='__main__', alter_sys=True)" > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
bench 1b_new paper-1b 130 ''
bench 1b_old paper-1b 130 "$OLD"
bench 100m_new paper-100m 60 ''
bench 100m_old paper-100m 60 "$OLD"
timeout 150 python3 -m pytest tests/routing/test_triton_cuda.py -v --tb=long -p no:cacheprovider \
  -k "route_bf16 or partial_bf16 or two_phase or deterministic or gradient_sink" > $R/test_triton_cuda.log 2>&1
echo "tests: $(grep -c ' PASSED' $R/test_triton_cuda.log) passed, $(grep -c ' FAILED' $R/test_triton_cuda.log) failed; $(tail -n 1 $R/test_triton_cuda.log | cut -c1-120)"; pack
