#!/usr/bin/env bash
# session 16 call 6: the GPU's clocks, power and throttle reasons sampled every 100 ms while the 1B baseline runs 30 steps of one microbatch and then 15 steps of two (--accum 2), each in its own process
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE > $R/smi_before.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $R/smi.csv 2>&1 &
SMI=$!
for a in 1 2; do
  n=$((30 / a))
  echo "start accum $a $(date +%T.%N)" >> $R/marks.txt
  timeout 150 python3 -m mhar bench step --preset paper-1b --methods baseline --accum $a --steps $n --warmup 3 --out $R --tag 1b_accum$a > $R/step_1b_accum$a.log 2>&1
  echo "end accum $a $(date +%T.%N)" >> $R/marks.txt
  grep -h "| paper" $R/step_1b_accum$a.md; rm -f $R/step_1b_accum$a.png
done
kill $SMI
python3 - "$R" <<'PY'
import json, sys
r = sys.argv[1]
for a in (1, 2):
    x = json.load(open(f"{r}/step_1b_accum{a}.json"))["results"][0]
    t = x["step_times_ms"]
    print(f"accum {a}: per microbatch, first 5 steps {[round(v / a, 1) for v in t[:5]]}, last 5 {[round(v / a, 1) for v in t[-5:]]}")
PY
awk -F', ' 'NR>1 {print $2, $7}' $R/smi.csv | sort | uniq -c | sort -rn | head -12
tar czf "$OUT/r.tar.gz" -C "$OUT" r
