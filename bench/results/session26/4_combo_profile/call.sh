#!/usr/bin/env bash
# session 26 call 4: did inductor's combo kernels fuse anything (call 3: 32.9 against 33.0
# ms at 100M)? The graphed 100M baseline by kernel kind with combo_kernels on
# (bench/profile_step.py; as shipped: call 1's profile_100m)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 150 python3 -c "
import runpy, sys
import torch._inductor.config as c
c.combo_kernels = True
sys.argv = ['profile_step.py', '--preset', 'paper-100m', '--methods', 'baseline', '--out', '$R']
runpy.run_path('bench/profile_step.py', run_name='__main__')" > $R/profile_100m_combo.log 2>&1
tail -n 24 $R/profile_100m_combo.log | cut -c1-160; pack
