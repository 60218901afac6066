"""Pick the best routing config from a one-read sweep (``bench/phase1_call.py --sweep``).

Scores each named variant of SWEEP.json by its time against the first (as built) entry's,
averaged over the sweep's source counts, and writes the best as an ``MHAR_ROUTING_CONFIG``
file under KEY (e.g. "512,1": width 512, several heads) when it takes at most LIMIT of the
first's; else exits 1, so that a device call runs its step comparison only for a real gain.
``--cost``: what to compare, the phase-1 read's routing kernels in all (default) or its
COEF pass and gather (sessions 41-42's rule, for sweeps of the backward alone).

    python3 bench/pick_config.py SWEEP.md SWEEP.json KEY LIMIT OUT.json [--cost routing|backward]
"""

import argparse
import json
import sys

# the sweep table's columns: sources | config | forward | COEF pass | gather | routing kernels
COST = {"routing": lambda r: float(r[5]), "backward": lambda r: float(r[3]) + float(r[4])}


def pick(md_lines: list[str], configs: dict, cost: str = "routing") -> tuple[str, float]:
    """The best variant's name and its mean time as a share of the first config's."""
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in md_lines if line.startswith("| ")]
    rows = [r for r in cells if r[0].isdigit()]  # not the header (a config's name may say "sources")
    times = {(int(r[0]), r[1]): COST[cost](r) for r in rows}
    counts = sorted({n for n, _ in times})
    first = next(iter(configs))
    score = {m: sum(times[(n, m)] / times[(n, first)] for n in counts) / len(counts) for m in configs
             if m != first and all((n, m) in times for n in counts)}
    if not score:
        raise SystemExit(f"no variant besides '{first}' was timed at every source count {counts}")
    best = min(score, key=score.get)
    return best, score[best]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("md")
    ap.add_argument("sweep")
    ap.add_argument("key", help='the config table key to write under, "WIDTH,MULTI_HEAD"')
    ap.add_argument("limit", type=float, help="the most of the first config's time that counts as a gain")
    ap.add_argument("out")
    ap.add_argument("--cost", choices=sorted(COST), default="routing")
    args = ap.parse_args()
    configs = json.load(open(args.sweep))
    with open(args.md) as f:
        best, share = pick(f.readlines(), configs, args.cost)
    print(f"best: {best}, {share:.3f} of '{next(iter(configs))}' ({args.cost})")
    if share > args.limit:
        return 1
    with open(args.out, "w") as f:
        json.dump({args.key: configs[best]}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
