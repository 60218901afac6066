"""`mhar data build` and `mhar data info`."""

from __future__ import annotations

import argparse
import json

from .build import DEFAULT_BPE_SAMPLE_MB, DEFAULT_SHARD_TOKENS, DEFAULT_VAL_FRACTION, build_dataset, default_dataset_dir


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="build and inspect token datasets",
                              description="Build and inspect token datasets (see docs/data.md).")
    sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    b = sub.add_parser("build", help="tokenise sources into a dataset directory",
                       description="Tokenise text into token shards plus a manifest. SOURCE is 'builtin' "
                                   "(Python's and our dependencies' sources and docs, no network), a file or "
                                   "folder (.txt .md .rst .jsonl .parquet), or hf:NAME[:CONFIG][@SPLIT].")
    b.add_argument("sources", nargs="*", default=["builtin"], metavar="SOURCE", help="default: builtin")
    b.add_argument("-o", "--out", help="dataset directory to write (default: under the mhar cache)")
    b.add_argument("--tokenizer", default="bpe",
                   help="'bpe' (train a byte-level BPE here), 'qwen' (Qwen2/3), or a tokenizer.json / tokenizer folder")
    b.add_argument("--vocab-size", type=int, default=8192, help="BPE vocabulary size (default 8192)")
    b.add_argument("--max-mb", default=None,
                   help="take at most this many MB of text; 'full' for everything (default: everything, "
                        "except the built-in corpus: 64 MB)")
    b.add_argument("--val-fraction", type=float, default=DEFAULT_VAL_FRACTION, help="share of documents for validation")
    b.add_argument("--text-field", default="text", help="field holding the text in jsonl/parquet/hf records")
    b.add_argument("--eot-token", default=None, help="end-of-text token of a custom tokenizer")
    b.add_argument("--bpe-sample-mb", type=float, default=DEFAULT_BPE_SAMPLE_MB, help="MB of text the BPE is trained on")
    b.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS, help="tokens per shard file")
    b.add_argument("--overwrite", action="store_true", help="replace an existing dataset (only once the new one is complete)")
    b.add_argument("-q", "--quiet", "--no-progress", action="store_true", help="no progress lines, only the dataset's path")
    b.set_defaults(func=_build)

    i = sub.add_parser("info", help="describe a dataset directory and check it",
                       description="Print a dataset's manifest summary after verifying shards and tokenizer.")
    i.add_argument("path", help="dataset directory (made by `mhar data build`)")
    i.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    i.set_defaults(func=_info)


def _build(args: argparse.Namespace) -> int:
    from .build import builtin_size_mb
    builtin_only = list(args.sources) == ["builtin"]
    if builtin_only:
        max_mb = builtin_size_mb(args.max_mb)
    else:  # no default size for other sources: everything unless --max-mb says otherwise
        max_mb = None if args.max_mb is None else builtin_size_mb(args.max_mb)
    out = args.out
    if out is None:
        if not builtin_only:
            raise ValueError("--out is required for sources other than builtin")
        from .build import builtin_dataset_name
        if args.tokenizer not in ("bpe", "qwen"):
            raise ValueError("--out is required with a custom tokenizer")
        out = default_dataset_dir() / builtin_dataset_name(args.tokenizer, args.vocab_size, "full" if max_mb is None else max_mb)
        from .build import is_complete, is_current
        if is_current(out) and not args.overwrite:
            print(f"{out} (already built; --overwrite rebuilds it)")
            return 0
        # a cached build from before special-token text was encoded as text is replaced
        overwrite = args.overwrite or is_complete(out)
    else:
        overwrite = args.overwrite
    path = build_dataset(
        args.sources, out, tokenizer=args.tokenizer, vocab_size=args.vocab_size, max_mb=max_mb,
        val_fraction=args.val_fraction, text_field=args.text_field, eot_token=args.eot_token,
        bpe_sample_mb=args.bpe_sample_mb, shard_tokens=args.shard_tokens, overwrite=overwrite,
        verbose=not args.quiet,
    )
    print(path)
    return 0


def _info(args: argparse.Namespace) -> int:
    from .dataset import TokenDataset

    ds = TokenDataset(args.path)
    m = ds.manifest
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    t = m["tokenizer"]
    print(f"dataset      {ds.path}")
    print(f"tokenizer    {t['name']}  vocab {t['vocab_size']} (model {t['model_vocab_size']})  eot {t['eot_token']}={t['eot_id']}  sha256 {t['sha256'][:16]}")
    print(f"dtype        {m['dtype']}")
    if ds.encode_special_tokens:
        print("specials     special-token text inside documents encoded as text (end-of-text only ends a document)")
    else:
        print("specials     special-token text inside documents may have become special ids (built before mhar "
              "encoded it as text; rebuild with --overwrite)")
    print(f"text         {m['documents']} documents, {m['bytes'] / 1e6:.1f} MB "
          f"({m['dedup']['duplicates_removed']} duplicates removed; skipped: {m['skipped']['binary']} binary, "
          f"{m['skipped']['non_utf8']} non-UTF-8, {m['skipped']['empty']} empty)")
    for s in ("train", "validation"):
        sp = m["splits"][s]
        print(f"{s:<12} {sp['documents']} documents, {sp['tokens']:,} tokens in {len(sp['shards'])} shard(s)")
    print("sources:")
    for src in m["sources"]:
        if src["documents"] or src["files"]:
            print(f"  {src['name']:<28} {src.get('version') or '':<14} {src['documents']:>7} docs {src['bytes'] / 1e6:8.1f} MB  {src['licence']}")
    return 0
