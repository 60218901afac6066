#!/usr/bin/env bash
# session 18 call 4: phase 1's forward with a head per program (fwd_split, the key-norm
# scales from a KeyScales shared by a step's calls; on at this commit) against it off, and
# with 2 warps and 4 programs per SM, in the whole step's routing kernels at 1280/73 and
# 1024/49 with 8 heads; the GPU tests of the split passes; then, if the split forward is
# faster at 1280, 30 timed steps at 1B, 350M and 100M (baseline and mhar)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
kms() { grep -h "| two-phase" $1 | awk -F'|' '{print $5}' | tr -d ' '; }
echo '{"*": {"fwd_split": false}}' > $R/off.cfg.json
echo '{}' > $R/s1.cfg.json
echo '{"*": {"fwd_split_warps": 2, "fwd_split_progs_per_sm": 4}}' > $R/s2.cfg.json
for s in 1280/36 1024/24; do
  n=${s%/*}
  for v in off s1 s2; do
    f=$R/ws${n}_$v
    MHAR_ROUTING_CONFIG=$R/$v.cfg.json timeout 80 python3 bench/routing.py --step-only --no-one-pass --shapes $s --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
    echo "$n $v $(grep -h '| two-phase' $f.md | cut -c1-230)"; pack
  done
done
timeout 150 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "one_head_per_program" > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
o=$(kms $R/ws1280_off.md); n=$(kms $R/ws1280_s1.md)
if python3 -c "import sys; sys.exit(0 if float('$n') < float('$o') - 1.0 else 1)"; then
  for p in 1b 350m 100m; do
    timeout 120 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
    grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
  done
fi
