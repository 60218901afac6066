"""Every row of this session's calls: the median step over the timed steps without the
last one (fit queues a step ahead, so the last timed step's time is only what was left
of it), with the median over all of them (what the calls printed) and the
peak. Run from this folder: python3 rows.py > rows.md"""
import json
import statistics
from pathlib import Path

print("| call | job | preset | method | parallel | compile / AdamW / graphs | median of 7 (ms) | median of 8 (ms) | "
      "last (ms) | peak GiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for path in sorted(Path(".").glob("*/out/*/*.json")):
    r = json.loads(path.read_text())
    s = [t * 1e3 for t in r["step_s"]]
    how = f"{r['compile']} / {r['adamw']} / {'on' if r['cuda_graphs'] else 'off'}"
    print(f"| {path.parts[0]} | {path.parts[2]} | {r['preset']} | {r['method']} | {r['parallel']} | {how} | "
          f"{statistics.median(s[:-1]):.1f} | {statistics.median(s):.1f} | {s[-1]:.1f} | {r['peak_mem_gib']:.1f} |")
