"""Session 47's product-launch files split by profiled step (session 48, offline).

profile_step.py's ``_product_launches.tsv`` lists every matrix product and attention
launch of all profiled steps in order, each step the same launches, so the first half of
a two-step file is step 1. Prints each step's time for the two methods and their ratio.
Run from the repository root:

    python3 bench/results/session48/offline/per_step.py
"""
import csv

FILES = {
    "350M 16 x 1024 (session 47 call 7)": "bench/results/session47/7_products_350m/profile_paper-350m_{}_regions_product_launches.tsv",
    "100M 64 x 2048 (session 47 call 8)": "bench/results/session47/8_products_100m_global/profile_paper-100m_{}_regions_b64_product_launches.tsv",
}
STEPS = 2

for title, pattern in FILES.items():
    print(title)
    per_method = {}
    for method in ("baseline", "mhar"):
        us = [float(r["us"]) for r in csv.DictReader(open(pattern.format(method)), delimiter="\t")]
        n = len(us) // STEPS
        per_method[method] = [sum(us[k * n:(k + 1) * n]) / 1e3 for k in range(STEPS)]
    for k in range(STEPS):
        b, m = per_method["baseline"][k], per_method["mhar"][k]
        print(f"  step {k + 1}: products and attention {b:7.2f} ms (baseline) {m:7.2f} ms (mhar), ratio {m / b:.3f}")
