"""Session 51's staged call: from a one-read sweep (bench/phase1_call.py --sweep), the variant
with the least routing-kernel time against the first row's, averaged over the source counts;
written as an MHAR_ROUTING_CONFIG file under KEY when at most LIMIT of the first row's, else
exit 1. Usage: pick.py SWEEP.md SWEEP.json KEY LIMIT OUT.json"""
import json
import sys

md, sweep, key, limit, out = sys.argv[1:]
rows = [[c.strip() for c in line.split("|")[1:-1]] for line in open(md) if line.startswith("| ") and "sources" not in line]
cost = {(int(r[0]), r[1]): float(r[5]) for r in rows}
counts = sorted({n for n, _ in cost})
configs = json.load(open(sweep))
first = next(iter(configs))
score = {m: sum(cost[(n, m)] / cost[(n, first)] for n in counts) / len(counts) for m in configs
         if m != first and all((n, m) in cost for n in counts)}
best = min(score, key=score.get)
print(f"best over {counts} sources: {best}, {score[best]:.3f} of '{first}' (routing kernels)")
if score[best] > float(limit):
    sys.exit(1)
json.dump({key: configs[best]}, open(out, "w"))
