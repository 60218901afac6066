"""Session 42 call 3 (session 40 call 2's, the same): from the whole-step sweep's JSON, the fastest phase-2 forward and
backward settings at 1024/49 with 8 heads (by `_fwd_kernel` and `_bwd_kernel` time),
written as an MHAR_ROUTING_CONFIG file for the 350M step. Usage: pick.py SWEEP.json OUT.json"""
import json
import sys

SWEEP = json.load(open(sys.argv[0].rsplit("/", 1)[0] + "/sweep.json"))
rows = json.load(open(sys.argv[1]))["whole_step"]["1024/49/H8"]


def kernel_ms(row, name):
    """ms of ``name`` in the row's top kernels (inf where it is not among them)."""
    ms = [k["ms"] for k in row["top"] if k["name"] == name]
    return sum(ms) if ms else float("inf")


def label(row):
    return row["schedule"].partition(", ")[2]


base = next(r for r in rows if label(r) == "")
pick = {}
for name, prefix in (("_fwd_kernel", "fwd"), ("_bwd_kernel", "bwd")):
    cands = [r for r in rows if label(r).startswith(prefix)]
    for r in [base, *cands]:
        print(f"{name} {label(r) or 'as built':28s} {kernel_ms(r, name):7.3f} ms  (all kernels {r['kernel_ms']:.3f})")
    best = min(cands, key=lambda r: kernel_ms(r, name))
    if kernel_ms(best, name) < 0.97 * kernel_ms(base, name):
        pick.update(SWEEP[label(best)])
print("pick:", pick)
json.dump({"1024,1": pick}, open(sys.argv[2], "w"))
