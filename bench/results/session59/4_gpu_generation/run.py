"""Session 59, on a GPU: left padding on CUDA, with a random-weight Llama of SmolLM2-135M's shape
(30 layers, d 576, 9 heads, 3 KV heads, vocab 49,152; the GGUF and the GSM8K files do not fit a
call's carry, so nothing pretrained).
1. Converted to delta routing against transformers' own model, both fp32 on CUDA: a left-padded
   batch of four prompts; max |logit difference| over the real tokens, converted vs transformers
   and batched vs each prompt alone.
2. `EvalModel` greedy generation (mhar eval's GSM8K path): 16 prompts of 700-850 random tokens,
   256 new tokens each (no stop), one prompt at a time, then as one batch; the same tokens?
run: PYTHONPATH=src python bench/results/session59/4_gpu_generation/run.py OUT_DIR"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mhar.eval.adapter import wrap_hf
from mhar.model.convert import from_hf_model

out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                  num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True,
                  initializer_range=0.08)
hf = LlamaForCausalLM(cfg).cuda().eval()
conv = from_hf_model(hf, heads=8, blocks=8).cuda().eval()
lengths = torch.tensor([40, 17, 33, 8])
ids = torch.randint(1, 49152, (4, 40))
mask = (torch.arange(40) >= 40 - lengths[:, None]).long()
ids, mask = ids.masked_fill(mask == 0, 0).cuda(), mask.cuda()
with torch.no_grad():
    a = conv(input_ids=ids, attention_mask=mask).logits
    b = hf(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    out["max_diff_converted_vs_transformers"] = (a[real] - b[real]).abs().max().item()
    out["max_diff_batched_vs_alone"] = max(
        (a[i, -n:] - conv(input_ids=ids[i:i + 1, -n:]).logits[0]).abs().max().item() for i, n in enumerate(lengths.tolist()))
    out["logit_scale"] = a[real].abs().max().item()
print(json.dumps(out), flush=True)


class Tok:
    eos_token_id, bos_token_id, model_max_length = None, None, 8192

    def __call__(self, s, add_special_tokens=False):
        raise NotImplementedError

    def decode(self, ids):
        return " ".join(map(str, ids))


m = wrap_hf(hf, Tok(), "random-smollm2-shape", "cuda")
g = torch.Generator().manual_seed(1)
ps = [torch.randint(1, 49152, (int(n),), generator=g).tolist() for n in torch.randint(700, 851, (16,), generator=g)]
m.generate(ps[0], 4)  # warm-up
torch.cuda.synchronize(); t = time.time()
single = [m.generate(p, 256) for p in ps]
torch.cuda.synchronize(); out["gen16_one_at_a_time_s"] = time.time() - t
t = time.time()
batched = m.generate_batch(ps, 256)
torch.cuda.synchronize(); out["gen16_batched_s"] = time.time() - t
same = [x == y for x, y in zip(single, batched)]
out["gen16_same_tokens"] = sum(same)
out["gen16_first_difference"] = [next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), None)
                                 for x, y in zip(single, batched)]
print(json.dumps(out), flush=True)
with open(f"{sys.argv[1]}/result.json", "w") as f:
    json.dump(out, f, indent=1)
