"""`mhar generate`: text from any model `mhar eval` loads (a run folder, a Hugging Face
folder, a .gguf file, 'smollm2-135m-instruct'), greedy or sampled.

  mhar generate runs/mhar-tiny "The history of" "def fibonacci(n):"
  mhar generate runs/mhar-tiny "Once upon a time" --temperature 0.8 --top-p 0.95 -n 200
  mhar generate runs/mhar-tiny ""            # from the start-of-document token alone

A prompt is tokenised as the model's own tokenizer starts text (a Hugging Face tokenizer's
BOS where it adds one); a run of ours starts it after the end-of-text token, as its
documents followed one in training. Several prompts
are generated in one left-padded batch; each stops at the end-of-text token or after
``--max-new-tokens``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from mhar.eval.adapter import EvalModel, Picker


@dataclass
class Sampling:
    """How the next token is chosen: greedy at ``temperature`` 0, else drawn from the
    softmax of logits / temperature, kept to the ``top_k`` most likely tokens (0: all) and
    to the smallest set whose probability reaches ``top_p`` (1: all), from a generator
    seeded with ``seed`` (the same call gives the same text; the rows of a batch share the
    generator, so a prompt's draws depend on the other prompts beside it)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def validate(self) -> None:
        if not 0 <= self.temperature < math.inf:
            raise ValueError(f"temperature={self.temperature} must be >= 0 and finite (0: greedy)")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k} must be >= 0 (0: every token)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")

    def picker(self, device: torch.device) -> Picker | None:
        """The next-token choice for :meth:`EvalModel.generate_batch`; None for greedy."""
        self.validate()
        if self.temperature == 0:
            return None
        generator = torch.Generator(device=device).manual_seed(self.seed)

        def pick(logits: Tensor) -> Tensor:
            return torch.multinomial(self.probabilities(logits), 1, generator=generator)[:, 0]
        return pick

    def probabilities(self, logits: Tensor) -> Tensor:
        """The distribution a token is drawn from, (B, vocab), after temperature, top-k and top-p."""
        # shifted so the largest is 0 and T kept a normal float: logits / T for a tiny T
        # overflowed to inf (and inf - inf, nan, in the softmax); this is all but greedy there
        logits = logits.float()
        temperature = max(self.temperature, torch.finfo(logits.dtype).tiny)
        logits = (logits - logits.amax(-1, keepdim=True)) / temperature
        if self.top_k and self.top_k < logits.shape[-1]:
            kth = logits.topk(self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, -math.inf)
        if self.top_p < 1:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(-1)
            # drop a token when the more likely ones before it already reach top_p (the most
            # likely token is always kept)
            drop = probs.cumsum(-1) - probs >= self.top_p
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, -math.inf))
        return logits.softmax(-1)


def generate_texts(model: EvalModel, prompts: list[str], max_new_tokens: int = 100,
                   sampling: Sampling | None = None) -> list[str]:
    """The continuation of each prompt (text), generated in one batch."""
    room = model.max_len - max_new_tokens
    if room < 1:
        raise ValueError(f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the model's "
                         f"{model.max_len} positions")
    ids = [model.generation_ids(p, room) for p in prompts]  # a longer prompt keeps its end
    pick = (sampling or Sampling()).picker(model.device)
    return [model.decode(out) for out in model.generate_batch(ids, max_new_tokens, None, pick)]


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text from a model (greedy or sampled)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a run folder, a Hugging Face model folder, a .gguf file or 'smollm2-135m-instruct'")
    p.add_argument("prompts", nargs="*", metavar="PROMPT", help="prompts (several: one batch; \"\" for none), or --file")
    p.add_argument("--file", default=None, help="read prompts from a file, one a line ('-': stdin)")
    p.add_argument("-n", "--max-new-tokens", type=int, default=100, help="tokens to generate after each prompt")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy; > 0: sample from softmax(logits / T)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="sample among the most likely tokens whose "
                   "probability reaches p (1: all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    p.add_argument("--device", default="auto", help="auto (cuda when there is one), cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    p.add_argument("--checkpoint", default=None, help="run folders: which checkpoint (default: the latest)")
    p.add_argument("--tokenizer", default=None, help="run folders: tokenizer.json or dataset folder")
    p.add_argument("--json", action="store_true", help="one JSON object a prompt: prompt, completion")
    p.set_defaults(func=main)


def _read_prompts(args) -> list[str]:
    prompts = list(args.prompts)
    if args.file is not None:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        # stdin keeps "\r\n" and "\r" line ends, which a file read in text mode turns into "\n"
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        prompts += [line for line in text.split("\n") if line.strip()]
    if not prompts:
        raise ValueError("no prompt: give PROMPT arguments (\"\" for none), or --file FILE ('-' for stdin)")
    return prompts


def main(args) -> int:
    prompts = _read_prompts(args)
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens} must be >= 1")
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    sampling.validate()  # before loading a model
    from mhar.eval.adapter import load_for_eval

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    model = load_for_eval(args.model, device=device, dtype=args.dtype, checkpoint=args.checkpoint,
                          tokenizer=args.tokenizer)
    completions = generate_texts(model, prompts, args.max_new_tokens, sampling)
    for k, (prompt, completion) in enumerate(zip(prompts, completions)):
        if args.json:
            print(json.dumps({"prompt": prompt, "completion": completion}, ensure_ascii=False))
        else:
            print(("\n" if k else "") + prompt + completion)
    return 0


__all__ = ["Sampling", "generate_texts"]
