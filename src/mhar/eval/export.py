"""Export a run folder as a Hugging Face model folder (``MharForCausalLM`` with its
remote code, plus a fast tokenizer), so any tool that loads Hugging Face causal LMs,
lm-evaluation-harness included, can evaluate it."""

from __future__ import annotations

from pathlib import Path


def export_run_to_hf(run: str | Path, out: str | Path, checkpoint: str | None = None,
                     tokenizer: str | None = None) -> Path:
    from transformers import PreTrainedTokenizerFast

    from mhar.eval.adapter import run_dataset_dir
    from mhar.model.hf import MharConfig, MharForCausalLM
    from mhar.train import load_run_config, load_run_model

    run, out = Path(run), Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty; choose a new folder")
    cfg = load_run_config(run)
    decoder = load_run_model(run, checkpoint=checkpoint)
    tok_path = Path(tokenizer) if tokenizer else run_dataset_dir(cfg)
    if tok_path is None:
        raise ValueError(f"{run} trained on synthetic tokens: pass --tokenizer (a tokenizer.json or dataset folder)")
    eot, eot_id = None, None
    split_special = True  # special-token text is encoded as text, as `mhar data build` encodes documents
    if tok_path.is_dir():
        from mhar.data import TokenDataset
        ds = TokenDataset(tok_path, verify=False)
        eot, eot_id = ds.tokenizer.id_to_token(ds.eot_id), ds.eot_id
        split_special = ds.encode_special_tokens  # False only for a dataset built before that
        tok_path = tok_path / "tokenizer.json"
    if not tok_path.is_file():
        raise FileNotFoundError(f"tokenizer {tok_path} not found")
    # the documents' end token as the model's EOS, so that generate() stops there
    hf = MharForCausalLM(MharConfig.from_model_config(decoder.config, eos_token_id=eot_id))
    hf.model.load_state_dict(decoder.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out)
    # split_special_tokens (saved in tokenizer_config.json) makes the exported tokenizer
    # encode text as the run's data was encoded, so lm-eval sees what `mhar eval` sees
    PreTrainedTokenizerFast(tokenizer_file=str(tok_path), eos_token=eot, split_special_tokens=split_special,
                            model_max_length=decoder.config.max_seq_len).save_pretrained(out)
    return out
