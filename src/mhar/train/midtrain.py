"""Mid-training of a converted model against a schedule-matched plain control
(SPEC.md section 3: the paper mid-trained Marin-8B, LR 4e-4 -> 4e-6 with AdamW
re-warm-up, EMA 0.999, z-loss 1e-4, weight decay 0.05).

Two runs from the same pretrained weights, with the same data order, validation
windows, schedule and budget:

* ``delta``   - the converted model (delta stream; gates start at zero, so it starts
  exactly where the control starts);
* ``control`` - the same weights on the standard stream (plain continued pretraining).

Each run is an ordinary run folder of :class:`mhar.train.Trainer` (metrics.jsonl,
checkpoints, ``--resume``), trained by :class:`MidtrainTrainer`, a Trainer whose
model is the pretrained one and which adds the z-loss and an EMA of the weights
(validation uses the EMA weights; ``ema=0`` turns it off). The EMA decay warms up,
``min(ema, (1 + t) / (10 + t))`` at step t, so short runs are not dominated by the
starting weights. The results go into ``comparison.md`` / ``comparison.json``.

The data must be tokenised with the source model's tokenizer: ``data="builtin"``
builds the built-in corpus with the tokenizer saved beside the converted model
(cached under ``$MHAR_CACHE/datasets``, keyed by the tokenizer's hash).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mhar.model.config import StreamConfig
from mhar.model.decoder import Decoder

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass
class MidtrainOptions:
    steps: int = 200
    lr: float = 4e-4
    min_lr_ratio: float = 0.01
    warmup: int = 20
    weight_decay: float = 0.05
    ema: float = 0.999
    z_loss: float = 1e-4
    batch_size: int = 8
    grad_accum: int = 1
    seq_len: int = 256
    eval_every: int = 20
    val_windows: int = 32
    tail_k: int = 5
    seed: int = 0
    data: str = "builtin"  # builtin | synthetic | a dataset folder
    max_mb: float = 0.0
    heads: int = 8
    blocks: int = 8
    control: bool = True
    device: str = "auto"
    dtype: str = "auto"
    threads: int = 0
    loss_chunk: int = 0
    checkpoint_every: int = 0  # 0: at the end only
    save_models: bool = True
    tasks: str = ""  # downstream tasks for mhar.eval after training ("gsm8k,gpqa:200"); "" = none
    task_limit: int = 0  # items per task (0: all)
    data_files: dict[str, str] = field(default_factory=dict)  # gated or custom tasks' files ({"gpqa": PATH})

    def validate(self) -> None:
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"ema={self.ema} must be in [0, 1) (0: off)")
        if self.z_loss < 0:
            raise ValueError(f"z_loss={self.z_loss} must be >= 0")
        if self.tasks:  # refuse bad task names now, not after both runs have trained
            if not self.save_models:
                raise ValueError("--tasks needs the saved models (drop --no-save)")
            from mhar.eval.runner import parse_task_list
            from mhar.eval.tasks import check_task

            for name, _ in parse_task_list(self.tasks):
                check_task(name, self.data_files)


# -- models -----------------------------------------------------------------------------

def load_model_folder(path: str | Path, heads: int = 8, blocks: int = 8, workdir: Path | None = None,
                      log=print) -> tuple[Decoder, Path]:
    """The delta-routed :class:`Decoder` of ``path`` and the folder holding its tokenizer.
    ``path``: a folder made by ``mhar convert`` (or any saved mhar model), or a source
    model (Llama/Qwen2/Qwen3 folder, .gguf) which is converted into ``workdir/converted``."""
    from mhar.model.hf import MharForCausalLM

    path = Path(path)
    config = path / "config.json"
    if path.is_dir() and config.exists() and json.loads(config.read_text()).get("model_type") == "mhar":
        folder = path
    else:
        from mhar.model.convert import convert, delta_block_size

        if workdir is None:
            raise ValueError(f"{path} is not a converted mhar model folder")
        folder = workdir / "converted"
        if not (folder / "config.json").exists():
            log(f"converting {path} into {folder}")
            if folder.exists():
                shutil.rmtree(folder)
            convert(path, folder, heads=heads, blocks=blocks, log=log)
        else:  # converted by an earlier call (--resume): it must be what this call asks for
            saved = json.loads((folder / "config.json").read_text())
            stream, layers = saved.get("stream", {}), saved.get("n_layers", 1)
            asked = {"heads": heads, "block_size": delta_block_size(layers, max(1, min(blocks, layers)))}
            differ = [f"{k} {stream.get(k)} (asked: {v})" for k, v in asked.items() if stream.get(k) != v]
            if differ:
                raise ValueError(f"{folder} was converted with other settings: {', '.join(differ)}; "
                                 "pass the --heads / --blocks it was made with, or use a new --out")
    model = MharForCausalLM.from_pretrained(folder)
    return model.model.float(), folder


def control_of(delta: Decoder) -> Decoder:
    """The plain (standard-stream) model with the same pretrained weights."""
    cfg = delta.config
    plain_cfg = type(cfg).from_dict({**cfg.to_dict(), "stream": asdict(StreamConfig(method="standard"))})
    with torch.device("meta"):
        plain = Decoder(plain_cfg)
    state = {k: v.detach().clone() for k, v in delta.state_dict().items() if not k.startswith("residual.")}
    plain.load_state_dict(state, strict=True, assign=True)
    return plain


@torch.no_grad()
def check_control_matches(model: Decoder, control: Decoder, name, tokens: int = 16) -> None:
    """The control is schedule-matched only if it starts as the same function: the model
    as ``mhar convert`` made it (delta routing at its identity, every gate zero). A model
    trained from scratch with routing, or a delta model whose gates have moved, would be
    compared with a different model, so it is refused before any training."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, min(tokens, model.config.max_seq_len)), generator=g)
    # (no train/eval switch: the decoder has no dropout, and under no_grad nothing is recomputed)
    diff = (model(ids).float() - control(ids).float()).abs().max().item()
    if not diff <= 1e-4:
        raise ValueError(f"{name}: the control (these weights on the standard stream) is not the same function "
                         f"as the model (max |logit difference| {diff:.3g} on random tokens; stream method "
                         f"{model.config.stream.method!r}). A schedule-matched control needs the model as "
                         "`mhar convert` made it, delta routing at its identity; pass --no-control to mid-train "
                         "this model alone")


def tokenizer_json(folder: Path) -> Path | None:
    f = Path(folder) / "tokenizer.json"
    return f if f.is_file() else None


# -- data -----------------------------------------------------------------------------

def builtin_dataset_for(tokenizer_file: Path, max_mb: float = 0.0, log=print) -> Path:
    """The built-in corpus tokenised with ``tokenizer_file`` (built once, cached)."""
    import hashlib

    from mhar.data.build import build_dataset, default_dataset_dir, is_complete, is_current

    sha = hashlib.sha256(Path(tokenizer_file).read_bytes()).hexdigest()[:12]
    size = f"{max_mb:g}mb" if max_mb else "full"
    path = default_dataset_dir() / f"builtin-tok{sha}-{size}"
    if is_current(path):
        return path
    if is_complete(path):  # the tokenizer's hash is the same, the encoding of special-token text is not
        log(f"re-tokenising the built-in corpus into {path}: it was built before special-token text in "
            f"documents was encoded as text")
    else:
        log(f"tokenising the built-in corpus with {tokenizer_file} into {path} (once; cached)")
    build_dataset(["builtin"], path, tokenizer=str(tokenizer_file), max_mb=max_mb or None,
                  overwrite=path.exists(), verbose=True)  # its stages and tokenising progress (a minute in full)
    return path


# -- the trainer ---------------------------------------------------------------------

def _trainer_class():
    from mhar.train.trainer import LossModule, Trainer

    class _ZLossModule(LossModule):
        def __init__(self, model: nn.Module, chunk_size: int, z_loss: float):
            super().__init__(model, chunk_size)
            self.z_loss = z_loss

        def forward(self, x: Tensor, y: Tensor) -> Tensor:
            return self.model.loss(x, y, chunk_size=self.chunk_size, z_loss=self.z_loss)

    class MidtrainTrainer(Trainer):
        """A :class:`~mhar.train.Trainer` over a given (pretrained) model, with z-loss
        and an EMA of the weights (evaluation uses the EMA)."""

        def __init__(self, cfg, run_dir, *, model: nn.Module, ema: float = 0.0, z_loss: float = 0.0, **kw):
            self._pretrained, self.ema_decay, self.z_loss = model, ema, z_loss
            self._ema_state: dict[str, Tensor] | None = None
            super().__init__(cfg, run_dir, **kw)
            if self.ema_decay and self._ema_state is None:
                self._ema_state = {n: p.detach().clone() for n, p in self.model.named_parameters()}

        def build_model(self) -> nn.Module:
            return self._pretrained

        def wrap_model(self, module: nn.Module) -> nn.Module:
            return super().wrap_model(_ZLossModule(module.model, module.chunk_size, self.z_loss))

        def launch_step(self):
            launched = super().launch_step()
            if self._ema_state is not None:
                t = launched.index  # steps completed before this one
                weight = 1.0 - min(self.ema_decay, (1.0 + t) / (10.0 + t))
                if self._healthy is not None:  # queued ahead of its checks: no move where the update was skipped
                    weight = torch.where(self._healthy, weight, 0.0)
                with torch.no_grad():
                    for n, p in self.model.named_parameters():
                        self._ema_state[n].lerp_(p.detach(), weight)
            return launched

        def swap_ema(self) -> None:
            """Exchange the live weights and the EMA weights (call twice to undo)."""
            if self._ema_state is None:
                return
            with torch.no_grad():
                for n, p in self.model.named_parameters():
                    tmp = p.detach().clone()
                    p.copy_(self._ema_state[n])
                    self._ema_state[n].copy_(tmp)

        def evaluate(self) -> float:
            self.swap_ema()
            try:
                return super().evaluate()
            finally:
                self.swap_ema()

        def evaluate_raw(self) -> float:
            return super().evaluate()

        def state_dict(self) -> dict[str, Any]:
            state = super().state_dict()
            if self._ema_state is not None:
                state["ema"] = {n: t.clone() for n, t in self._ema_state.items()}
            return state

        def load_state_dict(self, state: dict[str, Any]) -> None:
            super().load_state_dict(state)
            if "ema" in state:
                self._ema_state = {n: t.to(self.device).clone() for n, t in state["ema"].items()}

    return MidtrainTrainer


def _train_config(model_cfg, method: str, source: str, vocab: int, opts: MidtrainOptions, overrides):
    from mhar.train.config import DataConfig, TrainConfig, apply_train_overrides

    cfg = TrainConfig(
        model=model_cfg, data=DataConfig(source=source, vocab_size=vocab, val_windows=opts.val_windows),
        preset="midtrain", method=method, seed=opts.seed, steps=opts.steps, batch_size=opts.batch_size,
        grad_accum=opts.grad_accum, seq_len=opts.seq_len, lr=opts.lr, warmup=opts.warmup,
        min_lr_ratio=opts.min_lr_ratio, weight_decay=opts.weight_decay, eval_every=opts.eval_every,
        tail_k=opts.tail_k, checkpoint_every=opts.checkpoint_every or opts.steps, device=opts.device,
        dtype=opts.dtype, threads=opts.threads, loss_chunk=opts.loss_chunk, vocab_from_data=False)
    before = model_cfg.to_dict()
    cfg = apply_train_overrides(cfg, list(overrides or []))
    # the pretrained model is trained as it is: an override of its config would only be
    # written into the run's config.json, from which the probe and `mhar eval` build the model
    after = cfg.model.to_dict()
    changed = [f"stream.{k}" for k in before["stream"] if before["stream"][k] != after["stream"][k]]
    changed += [k for k in before if k != "stream" and before[k] != after[k]]
    if changed:
        raise ValueError(f"overrides cannot change the pretrained model ({', '.join(changed)}): it is trained as "
                         "converted (for other routing, convert again with other --heads / --blocks)")
    return cfg


def _save_hf(decoder: Decoder, folder: Path, tokenizer_folder: Path | None) -> None:
    from mhar.model.hf import MharConfig, MharForCausalLM

    tokens = {}  # the converted model's bos/eos/pad ids: without them generate() runs past EOS
    if tokenizer_folder is not None and (tokenizer_folder / "config.json").exists():
        source = json.loads((tokenizer_folder / "config.json").read_text())
        tokens = {k: source[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if source.get(k) is not None}
    with torch.device("meta"):
        hf = MharForCausalLM(MharConfig.from_model_config(decoder.config, **tokens))
    hf.model = decoder
    if folder.exists():
        shutil.rmtree(folder)
    hf.save_pretrained(folder)
    if tokenizer_folder is not None:
        for name in TOKENIZER_FILES:
            if (tokenizer_folder / name).exists():
                shutil.copy(tokenizer_folder / name, folder / name)


def _fmt(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def comparison_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the runs: validation loss at the start, at the end (EMA and raw
    weights), tail-mean, and the difference from the control."""
    control = next((r for r in rows if r["run"] == "control"), None)
    head = "| run | stream | start val loss | final val loss | final (raw weights) | tail-mean | vs control |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = "-" if control is None or r is control else f"{r['final_val_loss'] - control['final_val_loss']:+.4f}"
        lines.append(f"| {r['run']} | {r['stream']} | {_fmt(r['start_val_loss'])} | {_fmt(r['final_val_loss'])} | "
                     f"{_fmt(r.get('final_raw_val_loss'))} | {_fmt(r['tail_mean_val_loss'])} | {diff} |")
    return "\n".join(lines)


def _downstream(rows: list[dict[str, Any]], opts: MidtrainOptions, log, progress: bool = False) -> str:
    """Evaluate each run's saved model on ``opts.tasks`` with :mod:`mhar.eval` (records in
    ``<run>/eval``) and return the paired comparison (bootstrap CI, McNemar) as Markdown."""
    if not opts.save_models:
        raise ValueError("--tasks needs the saved models (drop --no-save)")
    from mhar.eval.adapter import load_for_eval
    from mhar.eval.runner import format_metrics, parse_task_list, run_tasks

    device = "cuda" if opts.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
    tasks = parse_task_list(opts.tasks)
    for row in rows:
        log(f"[{row['run']}] evaluating {row['hf']} on {opts.tasks}")
        model = load_for_eval(row["hf"], device=device, dtype="float32")
        out = Path(row["run_dir"]) / "eval"
        res = run_tasks(model, tasks, out_dir=out, limit=opts.task_limit or None, log=log,
                        progress=progress or "lines", data_files=opts.data_files)
        row["eval_dir"] = str(out)
        row["tasks"] = res["results"]
        del model
    lines = ["Downstream tasks:", ""] + [f"- {r['run']}: " + "; ".join(format_metrics(t, m).split("  (")[0]
                                                                          for t, m in r["tasks"].items())
                                         for r in rows]
    control = next((r for r in rows if r["run"] == "control"), None)
    delta = next((r for r in rows if r["run"] == "delta"), None)
    if control is not None and delta is not None:
        from mhar.eval.compare import compare_dirs, format_comparison

        paired = compare_dirs(control["eval_dir"], delta["eval_dir"])
        lines += ["", "Paired, delta (B) vs control (A):", "", format_comparison(paired, "control", "delta")]
    return "\n".join(lines)


def midtrain(model_path: str | Path, out: str | Path, opts: MidtrainOptions | None = None,
             overrides: list[str] | None = None, resume: bool = False, progress: bool = True,
             log=print) -> dict[str, Any]:
    """Mid-train the converted model at ``model_path`` (and its control) into ``out``."""
    from mhar.train.trainer import release_memory

    opts = opts or MidtrainOptions()
    opts.validate()
    if not Path(model_path).exists():  # before OUT is made
        raise FileNotFoundError(f"no model at {model_path}: give a folder made by `mhar convert`, a Hugging Face "
                                "Llama/Qwen2/Qwen3 folder or a .gguf file")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    delta, folder = load_model_folder(model_path, opts.heads, opts.blocks, workdir=out, log=log)
    if delta.config.stream.method != "delta":
        log(f"note: {model_path} has stream method {delta.config.stream.method!r}, not 'delta'")
    tok = tokenizer_json(folder)
    vocab = delta.config.vocab_size
    if opts.data == "builtin":
        if tok is None:
            raise ValueError(f"{folder} has no tokenizer.json: the built-in corpus must be tokenised with the "
                             "model's own tokenizer (convert from a folder or GGUF that has one, or pass --data "
                             "DATASET built with `mhar data build --tokenizer MODEL`)")
        source = str(builtin_dataset_for(tok, opts.max_mb, log=log))
    else:
        source = opts.data
    if source not in ("synthetic",):
        from mhar.data import TokenDataset

        ds = TokenDataset(source, tokenizer=str(tok) if tok is not None else None)
        if ds.vocab_size > vocab:
            raise ValueError(f"dataset {source} has a vocabulary of {ds.vocab_size}, larger than the model's {vocab}")

    runs = [("delta", delta)]
    if opts.control:
        control = control_of(delta)
        check_control_matches(delta, control, model_path)
        runs.append(("control", control))
    trainer_cls = _trainer_class()
    rows = []
    for name, model in runs:
        method = "delta" if name == "delta" else "baseline"
        cfg = _train_config(model.config, method, source, vocab, opts, overrides)
        run_dir = out / name
        trainer = trainer_cls(cfg, run_dir, model=model, ema=opts.ema, z_loss=opts.z_loss,
                              resume=resume and (run_dir / "checkpoints").exists(), label=name,
                              progress=progress, quiet=not progress)
        start_file = run_dir / "start_val_loss.json"
        if trainer.step == 0:
            start = trainer.evaluate_raw()
            start_file.write_text(json.dumps({"start_val_loss": start}) + "\n")
        else:
            start = json.loads(start_file.read_text())["start_val_loss"] if start_file.exists() else float("nan")
        if trainer.step < cfg.steps:
            summary = trainer.fit()
        else:
            summary = trainer.finish()
        raw = trainer.evaluate_raw()
        row = {"run": name, "stream": model.config.stream.method, "start_val_loss": start,
               "final_val_loss": summary["final_val_loss"], "final_raw_val_loss": raw if opts.ema else None,
               "tail_mean_val_loss": summary["tail_mean_val_loss"], "steps": summary["steps"],
               "tokens": summary["tokens"], "tokens_per_s": summary["tokens_per_s"], "run_dir": str(run_dir)}
        if opts.save_models:
            trainer.swap_ema()  # the saved model carries the EMA weights
            _save_hf(trainer.model, run_dir / "hf", folder)
            trainer.swap_ema()
            row["hf"] = str(run_dir / "hf")
        rows.append(row)
        del trainer
        release_memory()
    table = comparison_table(rows)
    downstream = ""
    if opts.tasks:
        downstream = _downstream(rows, opts, log, progress=progress)
        table = table + "\n\n" + downstream
    budget = (f"{opts.steps} steps x {opts.batch_size * opts.grad_accum} x {opts.seq_len} tokens, lr {opts.lr:g} "
              f"(re-warm-up {opts.warmup}, cosine to {opts.lr * opts.min_lr_ratio:g}), wd {opts.weight_decay:g}, "
              f"EMA {opts.ema:g}, z-loss {opts.z_loss:g}")
    text = (f"# Mid-training: {folder}\n\n{budget}; data: {source}\n\n{table}\n\n"
            "Validation loss on the same fixed windows for every run; 'final' uses the EMA weights when EMA is on. "
            + ("" if downstream else "Downstream tasks: `--tasks`, or `mhar eval` on each run's hf/ folder.\n"))
    (out / "comparison.md").write_text(text)
    result = {"model": str(folder), "data": source, "options": asdict(opts), "runs": rows, "table": table}
    (out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


__all__ = ["MidtrainOptions", "midtrain", "comparison_table", "control_of", "load_model_folder", "check_control_matches",
           "builtin_dataset_for"]
