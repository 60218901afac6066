"""The training loop, one small class.

Hooks a later feature overrides (multi-GPU, midtraining of converted models,
benchmarks) instead of copying the loop:

* :meth:`Trainer.build_model` - the ``nn.Module`` to train (default: a seeded
  :class:`~mhar.model.Decoder` of ``cfg.model``);
* :meth:`Trainer.wrap_model` - the parallel / compiled wrapper around the loss
  module (default: regional compilation of the decoder on CUDA, see ``cfg.compile``);
* :meth:`Trainer.compute_loss` - one micro-batch's loss;
* :meth:`Trainer.launch_step` - queue one optimiser step (data, forward, backward,
  update); :meth:`Trainer.finish_step` reads its loss and norm. With ``adamw=triton``
  :meth:`Trainer.fit` queues a step before it finishes the one before (hooks that count
  steps read :attr:`Trainer.steps_launched`);
* :meth:`Trainer.build_data` - loader, validation windows and vocabulary;
* ``rank`` / ``world_size`` and :meth:`Trainer.is_main` - who logs and checkpoints.

On the CPU a run is deterministic: a ``--resume`` from any checkpoint produces the
same loss sequence, bit for bit, as the uninterrupted run (the checkpoint holds the
model, AdamW, the schedule position, the torch / NumPy / Python RNG states and the
loader position).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from mhar.gpu_peak import device_peak_tflops
from mhar.model import Decoder, ModelConfig, StreamConfig
from mhar.provenance import source_commit
from mhar.train import checkpoint as ckpt
from mhar.train import dcp as dcpio
from mhar.train.config import TrainConfig, config_diff
from mhar.train.data import TrainData, build_data
from mhar.train.errors import DivergenceError, TrainingError
from mhar.train.graphs import GraphedStep
from mhar.train.metrics import (CHECKPOINTS, CONFIG, PLOT, SUMMARY, MetricsLog, memory_mb, plot_runs, tail_mean,
                                write_json)
from mhar.train.optim import build_optimizer
from mhar.train.schedule import lr_at


class LossModule(nn.Module):
    """``forward(x, y) -> loss``: the unit that :meth:`Trainer.wrap_model` wraps, so a
    compiled or data-parallel wrapper sees the loss computation as its forward."""

    def __init__(self, model: nn.Module, chunk_size: int = 0):
        super().__init__()
        self.model = model
        self.chunk_size = chunk_size

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return self.model.loss(x, y, chunk_size=self.chunk_size)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def release_memory() -> None:
    """Free what finished models and trainers still hold: a compiled model sits in
    reference cycles (freed only by the cycle collector), and PyTorch keeps freed GPU
    memory cached. Call between runs that train one after another in one process.
    Also drops torch.compile's compiled code: each run's variants (input dtypes,
    autocast's cache flag) would otherwise add up against its budget of 8 per function,
    past which it runs the function uncompiled."""
    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA GPU is available (use device=cpu or auto)")
    return torch.device(name)


def _is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


@dataclass
class LaunchedStep:
    """A step queued by :meth:`Trainer.launch_step`: its index (steps before it) and lr, and
    either its checked ``values`` (loss, grad norm) or the two numbers still on their way to
    the host (``host``, valid once ``ready`` has happened)."""

    index: int
    lr: float
    values: tuple[float, float] | None = None
    host: Tensor | None = None
    ready: torch.cuda.Event | None = None


class Trainer:
    """Train ``cfg`` into the run folder ``run_dir``.

    ``resume=True`` continues from the newest checkpoint in ``run_dir`` (its model
    config must equal ``cfg.model``: a difference is refused and listed). Without
    ``resume`` a folder that already holds checkpoints is refused, so no run is
    overwritten by accident.
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False, quiet: bool = False,
                 progress: bool = True, label: str | None = None, rank: int = 0, world_size: int = 1,
                 data: TrainData | None = None):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.quiet, self.progress = quiet, progress and not quiet
        self.label = label or cfg.method
        self.desc = self.label  # the progress bar's title
        self.rank, self.world_size = rank, world_size
        self.device = _resolve_device(cfg.device)
        if cfg.cuda_graphs == "on" and self.device.type != "cuda":  # before the data and the run folder
            raise ValueError(f"cuda_graphs=on needs a CUDA device; this run is on {self.device}")
        if cfg.threads and self.device.type == "cpu":
            torch.set_num_threads(cfg.threads)
        self.amp_dtype = self._amp_dtype()

        # data first: the model's vocabulary may come from the dataset
        self.data = data or self.build_data()
        if cfg.vocab_from_data and cfg.model.vocab_size != self.data.vocab_size:
            cfg.model.vocab_size = self.data.vocab_size
        if cfg.model.vocab_size < self.data.vocab_size:
            raise ValueError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the dataset's vocabulary "
                             f"({self.data.vocab_size}); set vocab_from_data=true or a larger vocab_size")
        cfg.validate()

        self.step = 0
        self.tokens = 0
        self.train_time = 0.0
        self.evals: list[tuple[int, float]] = []  # (step, validation loss)
        self.resumed_from: Path | None = None
        resume_state = self._prepare_folder(resume)

        seed_everything(cfg.seed)
        self.model = self.build_model().to(self.device)
        self.model.activation_checkpointing = cfg.activation_checkpointing
        # MFU: the model's training FLOPs a token (bench step's count) against the device's peak
        flops = getattr(self.model, "flops_per_token", None)
        self.flops_per_token = flops(cfg.seq_len) if flops is not None else None
        self.peak_tflops, self.peak_from = device_peak_tflops(self.device, cfg.peak_tflops)
        self.step_seconds: list[float] = []  # this process's steps, for the summary's steady rate
        # steps launched and not yet finished (launch_step / finish_step), and the device's
        # flag that every launched step was finite (adamw=triton)
        self._in_flight, self._healthy = 0, None
        one_cuda_process = self.device.type == "cuda" and cfg.parallel == "none" and world_size == 1
        # (known before wrap_model: under DDP, graphed steps sum the ranks' gradients themselves)
        self.use_graphs = cfg.cuda_graphs == "on" or (cfg.cuda_graphs == "auto" and one_cuda_process)
        self.graphed: GraphedStep | None = None  # captured on the first step when use_graphs
        self.loss_module = self.wrap_model(LossModule(self.model, cfg.loss_chunk))
        # the optimiser this run uses: "auto" is the Triton kernel on CUDA where the parameters
        # are plain tensors (one process or DDP; FSDP2 shards them into DTensors)
        triton_ok = self.device.type == "cuda" and cfg.parallel != "fsdp"
        self.adamw = cfg.adamw if cfg.adamw != "auto" else ("triton" if triton_ok else "torch")
        self.optimizer = build_optimizer(self.model, cfg.lr, cfg.weight_decay, (cfg.beta1, cfg.beta2), cfg.eps,
                                         cfg.decay_all, impl=self.adamw)
        if resume_state is not None:
            self.load_state_dict(resume_state)
            if self.is_main():  # only once the checkpoint has loaded: a refused resume keeps the folder's config
                self.cfg.save(self.run_dir / CONFIG)
                # the summary is a finished run's; this one trains on (fit writes it again at the end), and
                # `mhar compare --resume` must not take an interrupted extension's old summary as its result
                (self.run_dir / SUMMARY).unlink(missing_ok=True)
        self.log = MetricsLog(self.run_dir, resume_step=self.step if resume_state is not None else None,
                              tensorboard=self.is_main()) if self.is_main() else None

    # ------------------------------------------------------------------ hooks
    def build_data(self) -> TrainData:
        c = self.cfg
        return build_data(c.data, c.seq_len, c.batch_size, c.seed, self.rank, self.world_size)

    def build_model(self) -> nn.Module:
        """Called after ``seed_everything(cfg.seed)``: equal seeds give equal initial
        weights for the parameters that methods share."""
        return Decoder(self.cfg.model)

    def compile_mode(self) -> str:
        """The resolved ``compile`` setting: 'auto' is regions on CUDA (one process, DDP or
        FSDP2: the regions sit inside the wrappers' hooks), off on the CPU."""
        if self.cfg.compile != "auto":
            return self.cfg.compile
        regional = hasattr(self.model, "compile_regions")
        return "regions" if regional and self.device.type == "cuda" else "off"

    def compile_module(self, module: nn.Module) -> nn.Module:
        """Compile as ``compile_mode()`` says: the decoder's regions in place, or the
        whole ``module`` wrapped."""
        mode = self.compile_mode()
        if mode != "off":
            # start from an empty compile cache: variants compiled for earlier models in
            # this process count against torch.compile's budget of 8 per function, past
            # which it runs the function uncompiled (slow, and a checkpointed sublayer
            # compiled in forward but not in its recompute saves different tensors)
            torch._dynamo.reset()
        if mode == "regions":
            self.model.compile_regions()
        return torch.compile(module) if mode == "full" else module

    def wrap_model(self, module: nn.Module) -> nn.Module:
        return self.compile_module(module)

    def compute_loss(self, x: Tensor, y: Tensor) -> Tensor:
        return self.loss_module(x, y)

    def is_main(self) -> bool:
        return self.rank == 0

    # hooks for multi-process training (mhar.train.distributed overrides them)
    def sync_gradients(self) -> None:
        """After a step's last backward: nothing here; under DDP with CUDA graphs, the sum
        of the ranks' gradients (the graphs leave each rank's own)."""

    def graph_flat_gradients(self) -> bool:
        """Whether a graphed step keeps the gradients in one buffer (for one all-reduce)."""
        return False

    def graph_loss_scale(self) -> float:
        """What a graphed backward multiplies the loss by: the mean over micro-batches (and,
        where :meth:`sync_gradients` sums the ranks' gradients, over ranks)."""
        return 1.0 / self.cfg.grad_accum

    def reduce_loss(self, loss: Tensor) -> Tensor:
        """The step's summed micro-batch loss as logged: identity here, the mean over
        ranks under DDP / FSDP2."""
        return loss

    def clip_gradients(self, max_norm: float) -> Tensor:
        """Clip the gradients to ``max_norm``; returns the total norm before clipping."""
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)

    def gradient_norm(self) -> Tensor:
        """The gradients' total norm, as clip_gradients returns it, without clipping."""
        return torch.nn.utils.get_total_norm([p.grad for p in self.model.parameters() if p.grad is not None])

    # ------------------------------------------------------------------ setup
    def _amp_dtype(self) -> torch.dtype | None:
        if self.cfg.dtype == "bfloat16" or (self.cfg.dtype == "auto" and self.device.type == "cuda"):
            return torch.bfloat16
        return None

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / CHECKPOINTS

    def _start_fresh(self, has_checkpoints: bool) -> None:
        """A new run: refuse a folder that holds checkpoints; rank 0 writes the config."""
        if has_checkpoints:
            raise ValueError(f"run folder {self.run_dir} already holds checkpoints; pass --resume to continue "
                             "it or choose another --out")
        if self.is_main():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.cfg.save(self.run_dir / CONFIG)
            (self.run_dir / SUMMARY).unlink(missing_ok=True)

    def _check_resume_folder(self) -> None:
        """A resumed run: the folder exists and its saved model config matches ours."""
        if not self.run_dir.is_dir():
            raise FileNotFoundError(f"cannot resume: run folder {self.run_dir} does not exist")
        saved_cfg = self.run_dir / CONFIG
        if saved_cfg.exists():
            self.check_model_config(TrainConfig.load(saved_cfg).model)

    def _all_checkpoints(self) -> list[tuple[int, Path]]:
        """(step, path) of every checkpoint in the run folder, oldest first: one process's
        ``step_N.pt`` files and a multi-process run's sharded (DCP) ``step_N/`` folders."""
        return sorted(dcpio.list_checkpoints(self.checkpoint_dir) + ckpt.list_checkpoints(self.checkpoint_dir))

    def _prepare_folder(self, resume: bool) -> dict[str, Any] | None:
        """Create or check the run folder; returns the checkpoint state to resume from."""
        if not resume:  # a multi-process run's sharded checkpoints count too
            self._start_fresh(bool(self._all_checkpoints()))
            return None
        self._check_resume_folder()
        ckpt.clean_stale_tmp(self.checkpoint_dir)
        found = ckpt.latest_checkpoint(self.checkpoint_dir)
        if found is None:
            if dcpio.list_checkpoints(self.checkpoint_dir):
                raise FileNotFoundError(
                    f"cannot resume: {self.checkpoint_dir} holds only a multi-process run's sharded checkpoints, "
                    "which one process reads through a process group of one: resume with the run's parallel "
                    "setting (leave out --parallel none), or turn one into a .pt file with `mhar consolidate`")
            raise FileNotFoundError(f"cannot resume: no checkpoint in {self.checkpoint_dir}")
        path, state = found
        self.check_model_config(ModelConfig.from_dict(state["config"]["model"]))
        self.resumed_from = path
        return state

    def check_model_config(self, old: ModelConfig) -> None:
        """Refuse a checkpoint of another model; the stream's computation-only settings
        (the schedule, the chunk, ...) and the attention kernel may differ."""
        def what(cfg: ModelConfig) -> dict[str, Any]:
            d = cfg.to_dict()
            d["stream"] = {k: v for k, v in d["stream"].items() if k not in StreamConfig.COMPUTATION_ONLY}
            d.pop("attention_kernel")  # how attention is computed, not what
            return d
        diff = config_diff(what(old), what(self.cfg.model), "model.")
        if diff:
            raise ValueError(f"refusing to resume {self.run_dir} with a different model config: " + "; ".join(diff))

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tokens": self.tokens,
            "train_time": self.train_time,
            "evals": list(self.evals),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": {"step": self.step, "peak_lr": self.cfg.lr, "warmup": self.cfg.warmup,
                         "total": self.cfg.steps, "min_lr_ratio": self.cfg.min_lr_ratio},
            "rng": rng_state(),
            "loader": self.data.loader.state_dict(),
            "config": self.cfg.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        # torch's load_state_dict takes every group setting from the checkpoint, including
        # the implementation (fused / foreach) chosen for the run that saved it: keep ours
        impl = [{k: g[k] for k in ("fused", "foreach") if k in g} for g in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state["optimizer"])
        for group, kept in zip(self.optimizer.param_groups, impl):
            group.update(kept)
        self.step, self.tokens = int(state["step"]), int(state["tokens"])
        self.train_time = float(state.get("train_time", 0.0))
        self.evals = [tuple(e) for e in state.get("evals", [])]
        self.data.loader.load_state_dict(state["loader"])
        set_rng_state(state["rng"])

    def save_checkpoint(self) -> Path | None:
        if not self.is_main():
            return None
        bad = [n for n, p in self.model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            raise DivergenceError(f"parameters {', '.join(bad[:3])} are not finite at step {self.step}: "
                                  f"no checkpoint written; the last good checkpoint {self.last_checkpoint()} is kept")
        return ckpt.save_checkpoint(self.state_dict(), self.checkpoint_dir, self.step, self.cfg.keep_last)

    def last_checkpoint(self) -> Path | None:
        found = ckpt.list_checkpoints(self.checkpoint_dir)
        return found[-1][1] if found else None

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean loss over the fixed validation windows."""
        self.model.eval()
        val = self.data.val
        total, n = 0.0, 0
        for start in range(0, val.shape[0], self.cfg.batch_size):
            w = val[start:start + self.cfg.batch_size].to(self.device)
            with self.autocast():
                loss = self.model.loss(w[:, :-1], w[:, 1:], chunk_size=self.cfg.loss_chunk)
            total += float(loss) * w.shape[0]
            n += w.shape[0]
        self.model.train()
        return total / n

    # ------------------------------------------------------------------ training
    def train_step(self) -> tuple[float, float, float]:
        """One optimiser step (with gradient accumulation). Returns (loss, grad norm, lr).
        Raises :class:`DivergenceError` before touching the weights if the loss or the
        gradient norm is not finite."""
        return self.finish_step(self.launch_step())

    def launch_step(self) -> LaunchedStep:
        """Queue one optimiser step: its data, forward and backward, and the update. With
        ``adamw=triton`` nothing waits for the device, so :meth:`fit` can queue the next
        step before it reads this one's loss (:meth:`finish_step`); otherwise the loss and
        norm are checked here, before the update. The step queued is number
        ``steps_launched + 1``."""
        c = self.cfg
        index = self.steps_launched  # the steps before this one
        lr = lr_at(index, c.lr, c.warmup, c.steps, c.min_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(c.grad_accum):
            x, y = self.data.loader.next_batch()
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            if self.use_graphs:  # the first micro-batch writes the gradients, later ones add
                loss = self._graphed_step(x, y).run(x, y, accumulate=micro > 0)
            else:
                with self.autocast():
                    loss = self.compute_loss(x, y)
                (loss / c.grad_accum).backward()
            loss_sum += loss.detach().float()
        self.sync_gradients()
        loss_sum = self.reduce_loss(loss_sum)
        max_norm = c.grad_clip if c.grad_clip > 0 else math.inf
        if self.adamw == "triton":
            launched = self._kernel_update(loss_sum, max_norm, index, lr)
        else:
            loss_value = float(loss_sum) / c.grad_accum
            if not math.isfinite(loss_value):
                self.zero_grad()
                raise DivergenceError(self._divergence_message("loss", loss_value))
            grad_norm = float(self.clip_gradients(max_norm))
            if not math.isfinite(grad_norm):
                self.zero_grad()
                raise DivergenceError(self._divergence_message("gradient norm", grad_norm))
            self.optimizer.step()
            launched = LaunchedStep(index, lr, values=(loss_value, grad_norm))
        self.zero_grad()
        self._in_flight += 1
        return launched

    def finish_step(self, launched: LaunchedStep) -> tuple[float, float, float]:
        """Wait for a launched step's loss and gradient norm: (loss, grad norm, lr). A loss
        or norm that is not finite raises :class:`DivergenceError`, with the weights,
        moments and step counts as before it (and before any step queued after it). Steps
        finish in the order they were launched."""
        if launched.values is not None:
            loss_value, grad_norm = launched.values
        else:
            if launched.ready is not None:
                launched.ready.synchronize()
            loss_value, grad_norm = float(launched.host[0]) / self.cfg.grad_accum, float(launched.host[1])
            for what, value in (("loss", loss_value), ("gradient norm", grad_norm)):
                if not math.isfinite(value):
                    # the device skipped this update and every one queued after it (_kernel_update)
                    for _ in range(self._in_flight):
                        self.optimizer.rewind_step()
                    self._in_flight, self._healthy = 0, None
                    self.zero_grad()
                    raise DivergenceError(self._divergence_message(what, value))
        self._in_flight -= 1  # (only now: a step interrupted while it is awaited is still in flight)
        return loss_value, grad_norm, launched.lr

    def _kernel_update(self, loss_sum: Tensor, max_norm: float, index: int, lr: float) -> LaunchedStep:
        """The update with adamw=triton, queued without waiting for the device. The clip's
        scale (clip_grad_norm_'s) stays on the device; a loss or norm that is not finite
        makes it NaN, which the kernel takes as no update, for this step and every step
        queued after it (``_healthy``), so that :meth:`finish_step` can stop the run with the
        weights as they were. The loss and norm are copied to the host behind this step's
        work alone: a step queued after it does not delay them."""
        from mhar.train.adamw_kernel import clip_scale

        norm = self.gradient_norm()
        finite = torch.isfinite(norm) & torch.isfinite(loss_sum)
        self._healthy = finite if self._healthy is None else self._healthy & finite
        scale = torch.where(self._healthy, clip_scale(norm, max_norm), math.nan)
        self.optimizer.step(grad_scale=scale)
        values = torch.stack([loss_sum.float(), norm.float()])
        if self.device.type != "cuda":
            return LaunchedStep(index, lr, host=values)
        host = torch.empty(2, dtype=torch.float32, pin_memory=True)
        host.copy_(values, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return LaunchedStep(index, lr, host=host, ready=ready)

    @property
    def steps_launched(self) -> int:
        """Steps finished (``step``) and queued but not yet finished (at most one, in
        :meth:`fit` with ``adamw=triton``). While a step is being launched (its data, its
        ``compute_loss``), the steps before it."""
        return self.step + self._in_flight

    def _pauses_after(self, step: int) -> bool:
        """Whether fit evaluates, checkpoints or ends after ``step`` (1-based): then the step
        after it must not be in flight yet."""
        c = self.cfg
        return step >= c.steps or step % c.eval_every == 0 or step % c.checkpoint_every == 0

    def zero_grad(self) -> None:
        # under CUDA graphs the gradients stay: the next step's first replay overwrites them
        if self.graphed is None:
            self.optimizer.zero_grad(set_to_none=True)

    def _graphed_step(self, x: Tensor, y: Tensor) -> GraphedStep:
        """The forward+backward graph, captured on the first micro-batch."""
        if self.graphed is None:
            def loss_fn(xb: Tensor, yb: Tensor) -> Tensor:
                # autocast's weight-cast cache must be off under a capture
                with torch.autocast("cuda", dtype=self.amp_dtype, enabled=self.amp_dtype is not None,
                                    cache_enabled=False):
                    return self.compute_loss(xb, yb)
            self.graphed = GraphedStep(loss_fn, self.model.parameters(), x, y, scale=self.graph_loss_scale(),
                                       flat_grads=self.graph_flat_gradients())
        return self.graphed

    def _divergence_message(self, what: str, value: float) -> str:
        last = self.last_checkpoint()
        kept = f"the last good checkpoint {last} is kept (resume with --resume, e.g. with a lower lr)" if last \
            else "no checkpoint was written yet"
        return f"{what} is {value} at step {self.step + 1} of run {self.run_dir}: training stopped; {kept}"

    def fit(self) -> dict[str, Any]:
        """Train to ``cfg.steps``; returns the summary (also written to ``summary.json``)."""
        c = self.cfg
        if c.warmup >= c.steps and self.step < c.steps and self.is_main():  # allowed (smoke runs), rarely meant
            peak = lr_at(c.steps - 1, c.lr, c.warmup, c.steps, c.min_lr_ratio)
            print(f"[{self.label}] note: warmup={c.warmup} >= steps={c.steps}: the learning rate rises for "
                  f"the whole run, to {peak:.3g} of lr={c.lr:g}, with no decay", file=sys.stderr)
        if self.device.type == "cuda" and self.peak_tflops is None and self.step < c.steps and self.is_main():
            print(f"[{self.label}] note: no MFU is logged: {self.peak_from}", file=sys.stderr)
        bar = self._progress_bar()
        # adamw=triton: the next step is queued before this one's loss is read, so the host's
        # work (data, launches, logging) runs while the device computes, except before an
        # evaluation, a checkpoint or the end, which must see this step's weights alone
        ahead_ok = self.adamw == "triton"
        flight: list[LaunchedStep] = []  # launched, not finished: step + 1 (and step + 2)
        step_tokens = c.tokens_per_step * self.world_size
        try:
            while self.step < c.steps:
                if not flight:
                    clock = time.perf_counter()  # nothing in flight: this step's time starts here
                    flight.append(self.launch_step())
                if ahead_ok and not self._pauses_after(self.step + 1):
                    flight.append(self.launch_step())
                loss, grad_norm, lr = self.finish_step(flight[0])
                flight.pop(0)
                if self.device.type == "cuda" and not flight:
                    torch.cuda.synchronize(self.device)
                now = time.perf_counter()
                dt, clock = now - clock, now  # with a step in flight: the time since the last one ended
                self.step += 1
                self.tokens += step_tokens
                self.train_time += dt
                self.step_seconds.append(dt)
                row = {"step": self.step, "tokens": self.tokens, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                       "tokens_per_s": step_tokens / dt if dt > 0 else 0.0, "memory_mb": memory_mb(self.device)}
                mfu = self.mfu(row["tokens_per_s"])
                if mfu is not None:
                    row["mfu"] = mfu
                last = self.step == c.steps
                if self.step % c.eval_every == 0 or last:
                    val = self.evaluate()
                    self.evals.append((self.step, val))
                    row["val_loss"] = val
                if self.log is not None and (self.step % c.log_every == 0 or "val_loss" in row or last):
                    self.log.log(row)
                self._report(bar, row)
                if self.step % c.checkpoint_every == 0 or last:
                    self.save_checkpoint()
        except OSError as err:
            if _is_disk_full(err):
                last = self.last_checkpoint()
                raise TrainingError(f"disk full while writing to {self.run_dir} ({err}); "
                                    f"last good checkpoint: {last or 'none'}") from err
            raise
        finally:
            self._settle(flight, step_tokens)
            if bar is not None:
                bar.close()
            if self.log is not None:
                self.log.close()
        return self.finish()

    def _settle(self, flight: list[LaunchedStep], step_tokens: int) -> None:
        """Steps still in flight when fit stops on an exception (an interrupt with a step
        queued ahead): each finishes and counts, unlogged, so that ``step`` says what the
        weights have taken; one that diverged takes back itself and those after it."""
        for launched in flight:
            if not self._in_flight:  # a divergence already took these back
                break
            try:
                self.finish_step(launched)
            except DivergenceError:
                break
            self.step += 1
            self.tokens += step_tokens
        flight.clear()

    def finish(self) -> dict[str, Any]:
        self.graphed = None  # the graph's memory pool holds a step's activations; a later step captures again
        summary = self.summary()
        if self.is_main():
            write_json(self.run_dir / SUMMARY, summary)
            plot_runs({self.label: self.run_dir}, self.run_dir / PLOT, title=f"{self.label} ({self.cfg.preset})",
                      methods={self.label: self.cfg.method})
        return summary

    def mfu(self, tokens_per_s: float) -> float | None:
        """Model FLOPs utilisation of each device at ``tokens_per_s`` (all processes' tokens):
        the model's training FLOPs a token (``Decoder.flops_per_token``, as ``mhar bench
        step``; routing not counted) over the device's peak (``mhar.gpu_peak``); None
        without a peak or a FLOP count."""
        if not self.peak_tflops or self.flops_per_token is None:
            return None
        return self.flops_per_token * tokens_per_s / (self.peak_tflops * 1e12 * self.world_size)

    def steady_tokens_per_s(self) -> float | None:
        """The median step's tokens/s over this process's steps after its first (which
        compiles and captures); None before two steps."""
        if len(self.step_seconds) < 2:
            return None
        median = statistics.median(self.step_seconds[1:])
        return self.cfg.tokens_per_step * self.world_size / median if median > 0 else None

    def summary(self) -> dict[str, Any]:
        vals = [v for _, v in self.evals]
        steady = self.steady_tokens_per_s()
        mfu = self.mfu(steady) if steady is not None else None
        k = self.cfg.tail_k
        counts = self.model.parameter_counts() if hasattr(self.model, "parameter_counts") else {}
        return {
            "label": self.label,
            "method": self.cfg.method,
            "preset": self.cfg.preset,
            "stream": self.cfg.model.stream.__dict__ if hasattr(self.cfg.model, "stream") else {},
            "steps": self.step,
            "tokens": self.tokens,
            "final_val_loss": vals[-1] if vals else math.nan,
            "tail_mean_val_loss": tail_mean(vals, k),
            "tail_k": min(k, len(vals)),
            "evals": [list(e) for e in self.evals],
            "tokens_per_s": self.tokens / self.train_time if self.train_time > 0 else 0.0,
            "train_time_s": self.train_time,
            # the median step's rate, without the first step's compiling (None before two steps)
            "steady_tokens_per_s": steady,
            "mfu": mfu, "peak_tflops": self.peak_tflops, "peak_from": self.peak_from,
            "params": counts,
            "device": str(self.device),
            "dtype": str(self.amp_dtype or torch.float32).replace("torch.", ""),
            # what the run's "auto" settings resolved to
            "compile": self.compile_mode(), "cuda_graphs": self.use_graphs, "adamw": self.adamw,
            "torch": torch.__version__, "commit": source_commit(),
        }

    # ------------------------------------------------------------------ progress
    def _progress_bar(self):
        if not self.progress or not self.is_main():
            return None
        from tqdm.auto import tqdm

        return tqdm(total=self.cfg.steps, initial=self.step, desc=self.desc, unit="step", dynamic_ncols=True,
                    file=sys.stderr, leave=True)

    def _report(self, bar, row: dict[str, Any]) -> None:
        if not self.is_main():
            return
        if bar is not None:
            post = {"loss": f"{row['loss']:.3f}", "tok/s": f"{self.tokens / max(self.train_time, 1e-9):.0f}"}
            if "mfu" in row:
                post["MFU"] = f"{100 * row['mfu']:.1f}%"
            if self.evals:
                post["val"] = f"{self.evals[-1][1]:.3f}"
            bar.set_postfix(post, refresh=False)
            bar.update(1)
        elif self.quiet and ("val_loss" in row or row["step"] == self.cfg.steps):
            rate = self.tokens / max(self.train_time, 1e-9)
            eta = (self.cfg.steps - self.step) * self.cfg.tokens_per_step * self.world_size / max(rate, 1e-9)
            val = f" val {row['val_loss']:.4f}" if "val_loss" in row else ""
            print(f"[{self.label}] step {self.step}/{self.cfg.steps} loss {row['loss']:.4f}{val} "
                  f"lr {row['lr']:.2e} tok/s {rate:.0f} eta {eta:.0f}s", file=sys.stderr, flush=True)
