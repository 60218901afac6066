"""The fastest deferred variant of chunk_1024.md (with dw) as a routing-config file."""
import json, re, sys
md, sweep, out = sys.argv[1:4]
cfgs = json.load(open(sweep))
best = None
for line in open(md):
    m = re.match(r"\| deferred (.+?) \| ([\d.]+) \|", line)
    if m and cfgs[m.group(1)].get("pending_dw", 1) != 0 and (best is None or float(m.group(2)) < best[1]):
        best = (m.group(1), float(m.group(2)))
print("picked", best)
json.dump({"1024,1": {**cfgs[best[0]], "phase2_deferred": True}}, open(out, "w"))
