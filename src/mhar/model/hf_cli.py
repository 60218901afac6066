"""`mhar convert`: graft delta routing onto a pretrained model, logits unchanged.
(`mhar midtrain` lives in mhar.train.midtrain_cli.)"""

from __future__ import annotations

import argparse
import json

DEFAULT_CHECK_TEXT = ("The quick brown fox jumps over the lazy dog. In 1905 Albert Einstein published four papers "
                      "that changed physics; the third introduced special relativity.")


def run_convert(args: argparse.Namespace) -> int:
    import torch

    from mhar.model.convert import convert

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    _, report = convert(args.src, args.dst, heads=args.heads, blocks=args.blocks, check=not args.no_check,
                        text=args.text, dtype=dtype)
    print(json.dumps(report, indent=2))
    if not args.no_check:
        worst = max(v for k, v in report.items() if k.startswith("max_abs_diff"))
        if worst != 0.0:
            print(f"mhar convert: warning: the converted model differs from the source (max |diff| = {worst})")
            return 1
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "convert", help="convert a Llama/Qwen2/Qwen3 model (HF folder or GGUF) into a delta-routed mhar model",
        description="Graft delta attention residuals (SPEC.md section 3) onto a pretrained model: every weight is "
                    "kept, gates and the null source start at zero, so the converted model's logits equal the "
                    "original's exactly (checked in fp32 on random tokens and a short text). SRC: a Hugging Face "
                    "folder of a Llama, Qwen2 or Qwen3 model, or a .gguf file of one (dequantised). DST: a new "
                    "folder (safetensors, config, tokenizer, and remote code for trust_remote_code).")
    p.add_argument("src", help="Hugging Face model folder or .gguf file")
    p.add_argument("dst", help="output folder (must not exist or be empty)")
    p.add_argument("--heads", type=int, default=8, help="routing heads H (must divide the hidden size; default 8)")
    p.add_argument("--blocks", type=int, default=8,
                   help="blocks of consecutive layers, one delta source each (default 8: a 32-layer model gets "
                        "4 layers per block)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="dtype of the saved weights (the identity check always runs in float32)")
    p.add_argument("--text", default=DEFAULT_CHECK_TEXT, help="text for the identity check on real tokens (default: a fixed English sentence)")
    p.add_argument("--no-check", action="store_true", help="skip the identity check")
    p.set_defaults(func=run_convert)
