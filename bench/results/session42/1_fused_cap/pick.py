"""Session 41 call 2 (copied for session 42 call 1): from a one-read sweep, the fastest variant (its COEF pass, plus the
gather where it has one) against the first row's, at the two largest source counts; write
it as an MHAR_ROUTING_CONFIG file under KEY when at least LIMIT of the first row's, else exit 1.
Usage: pick.py SWEEP.md SWEEP.json KEY LIMIT OUT.json"""
import json
import sys

md, sweep, key, limit, out = sys.argv[1:]
rows = [[c.strip() for c in line.split("|")[1:-1]] for line in open(md) if line.startswith("| ") and "sources" not in line]
counts = sorted({int(r[0]) for r in rows})[-2:]
cost = {(int(r[0]), r[1]): float(r[3]) + float(r[4]) for r in rows}
configs = json.load(open(sweep))
first = next(iter(configs))
score = {m: sum(cost[(n, m)] / cost[(n, first)] for n in counts) / len(counts) for m in configs
         if m != first and all((n, m) in cost for n in counts)}
best = min(score, key=score.get)
print(f"best at {counts} sources: {best}, {score[best]:.3f} of '{first}' (COEF pass + gather)")
if score[best] > float(limit):
    sys.exit(1)
json.dump({key: configs[best]}, open(out, "w"))
