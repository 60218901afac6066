#!/usr/bin/env bash
# session 29 call 3: the 100M baseline's kernels by kind (bench/profile_step.py, graphed)
# under inductor's mix-order reduction settings, one process each: the default split (16
# rows), 32, 64, and mix-order off. Kernel times per kind are steadier than one process's
# step time (call 1 measured the steps: 31.9-32.6 ms across these settings)
# run: C=<commit> OUT=$OUT bash bench/results/session29/3_mix_order_profiles/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
prof() {  # $1 tag, $2 env, $3 python run before the profile
  mkdir -p $R/$1
  env $2 timeout 150 python3 -c "
import runpy, sys
import torch._inductor.config as ic
$3
sys.argv = ['profile_step.py', '--preset', 'paper-100m', '--methods', 'baseline', '--out', '$R/$1']
runpy.run_path('bench/profile_step.py', run_name='__main__')" > $R/$1/profile.log 2>&1
  echo "== $1 at $(( $(date +%s) - t0 )) s"; grep -A 10 "^kind " $R/$1/profile.log | head -11; grep "MFU" $R/$1/profile.log | tail -1; pack
}
prof split16 X=1 ''
prof split32 X=1 'ic.triton.mix_order_reduction_split_size = 32'
prof split64 X=1 'ic.triton.mix_order_reduction_split_size = 64'
prof mix_off TORCHINDUCTOR_MIX_ORDER_REDUCTION=0 ''
