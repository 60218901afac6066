# GSM8K generation on SmolLM2-135M (CPU): the first 8 items one at a time, then as one batch.
# run: PYTHONPATH=src python bench/results/session59/3_gsm8k_batch_cpu/gen_time.py
import time, torch
from mhar.eval.adapter import load_for_eval
from mhar.eval.tasks import load_task
m = load_for_eval("smollm2")
task = load_task("gsm8k")
items = task.items[:8]
prompts = [m.encode(it.prompt) for it in items]
stops = [it.stop for it in items]
t = time.time(); single = [m.generate(p, 256, s) for p, s in zip(prompts, stops)]; t1 = time.time() - t
t = time.time(); batch = m.generate_batch(prompts, 256, stops); t2 = time.time() - t
print("prompt lens", [len(p) for p in prompts]); print("out lens", [len(o) for o in single])
print(f"single {t1:.1f}s batch {t2:.1f}s same={single == batch}")
