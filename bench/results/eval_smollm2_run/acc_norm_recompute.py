"""Session 58: lm-eval's acc_norm (the answer's length without the delimiter space) recomputed
from this run's stored per-item log-likelihoods, beside the acc_norm it reported (space counted).
Run from the repository root: PYTHONPATH=src python bench/results/eval_smollm2_run/acc_norm_recompute.py"""
import json, numpy as np
from mhar.eval.tasks import load_task, subset
for name, n in [("arc_easy",500),("arc_challenge",300),("piqa",500),("hellaswag",300)]:
    items = subset(load_task(name).items, n, 1234)
    recs = [json.loads(l) for l in open(f"bench/results/eval_smollm2_run/{name}.jsonl")]
    assert len(recs) == len(items)
    a = b = c = flips = 0
    for it, r in zip(items, recs):
        assert r["gold"] == it.gold
        lp = np.array(r["logprobs"])
        L = np.array([len(x) for x in it.continuations], float)
        p1 = int((lp / L).argmax()); p2 = int((lp / (L - 1)).argmax())
        assert p1 == r["pred_norm"]
        a += p1 == it.gold; b += p2 == it.gold; flips += p1 != p2
    print(f"{name}: n={len(items)} acc_norm(space incl, as reported)={100*a/len(items):.1f} lm-eval (no space)={100*b/len(items):.1f} flips={flips}")
