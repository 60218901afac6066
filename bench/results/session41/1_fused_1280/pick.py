"""Session 41 call 1: the fastest fused variant at 1280 as an MHAR_ROUTING_CONFIG file when
its routing kernels are at least 3% faster than the two passes at the two largest source
counts, else exit 1. Usage: pick.py SWEEP.md SWEEP.json OUT.json"""
import json
import sys

rows = [line.split("|")[1:-1] for line in open(sys.argv[1]) if line.startswith("| ") and "sources" not in line]
rows = [[c.strip() for c in r] for r in rows]
counts = sorted({int(r[0]) for r in rows})[-2:]
total = {(int(r[0]), r[1]): float(r[5]) for r in rows}
names = {r[1] for r in rows} - {"as built (two passes)"}
score = {m: sum(total[(n, m)] / total[(n, "as built (two passes)")] for n in counts) / len(counts) for m in names
         if all((n, m) in total for n in counts)}
best = min(score, key=score.get)
print(f"best at {counts} sources: {best}, {score[best]:.3f} of the two passes' routing kernels")
if score[best] > 0.97:
    sys.exit(1)
json.dump({"1280,1": json.load(open(sys.argv[2]))[best]}, open(sys.argv[3], "w"))
