"""Session 40 call 7: the 32-lane, 9-per-SM fused pass as an MHAR_ROUTING_CONFIG file when
its COEF pass is at least 4% faster than as built at the largest source count, else exit 1.
Usage: pick.py SWEEP.md OUT.json"""
import json
import sys

rows = [line.split("|")[1:-1] for line in open(sys.argv[1]) if line.startswith("| ") and "sources" not in line]
rows = [[c.strip() for c in r] for r in rows]
top = max(int(r[0]) for r in rows)
coef = {r[1]: float(r[3]) for r in rows if int(r[0]) == top}
base, new = coef["as built (64 lanes, 8 per SM)"], coef["32 lanes, 9 per SM, cap 224"]
print(f"{top} sources: COEF pass {new:.3f} against {base:.3f} ms")
if new > 0.96 * base:
    sys.exit(1)
json.dump({"1024,1": {"coef_grads_lanes": 32, "coef_split_progs_per_sm": 9, "coef_split_maxnreg": 224}},
          open(sys.argv[2], "w"))
