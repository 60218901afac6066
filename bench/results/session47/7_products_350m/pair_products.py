"""Pair the product and attention launches of two methods' profiles (profile_step.py's
_product_launches.tsv) by kernel name and occurrence (the k-th launch of each name), and
sum the differences by kernel and by the kind of kernel that ran before it in the second
method. Run in this folder: python3 pair_products.py [FIRST.tsv SECOND.tsv] (default:
this folder's 350M baseline and mhar)."""
import collections
import csv
import sys

A, B = sys.argv[1:3] if len(sys.argv) > 2 else ("profile_paper-350m_baseline_regions_product_launches.tsv",
                                                "profile_paper-350m_mhar_regions_product_launches.tsv")


def load(path):
    rows, seen = {}, collections.Counter()
    for r in csv.DictReader(open(path), delimiter="\t"):
        seen[r["name"]] += 1
        rows[(r["name"], seen[r["name"]])] = r
    return rows


a, b = load(A), load(B)
assert a.keys() == b.keys()
steps = 2
by_name = collections.defaultdict(lambda: [0, 0.0, 0.0])
by_prev = collections.defaultdict(lambda: [0, 0.0, 0.0])
for key, ra in a.items():
    rb = b[key]
    ua, ub = float(ra["us"]), float(rb["us"])
    for table, k in ((by_name, key[0][:60]), (by_prev, (rb["prev_kind"], rb["prev"][:30]))):
        table[k][0] += 1
        table[k][1] += ua
        table[k][2] += ub
for title, table in (("by kernel", by_name), ("by the kernel before it in the second profile", by_prev)):
    print(f"{title}: launches a step, ms a step in the first and the second, difference, ratio")
    for k, (n, ua, ub) in sorted(table.items(), key=lambda kv: -(kv[1][2] - kv[1][1])):
        if abs(ub - ua) / steps > 20:  # more than 0.02 ms a step
            print(f"  {n / steps:5.0f} {ua / steps / 1e3:8.3f} {ub / steps / 1e3:8.3f} {(ub - ua) / steps / 1e3:+7.3f} "
                  f"{ub / ua:6.3f}  {k}")
