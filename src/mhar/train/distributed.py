"""Multi-GPU and multi-node training on PyTorch's own engine: DDP and FSDP2 under
``torchrun`` (see docs/distributed.md).

``torchrun --nproc_per_node=N -m mhar train --parallel ddp|fsdp ...`` starts N
processes; each one builds a :class:`DistributedTrainer`, which is the ordinary
:class:`~mhar.train.trainer.Trainer` with these hooks changed:

* the loader is built for this rank (``TokenLoader`` / the synthetic loader take
  ``rank`` / ``world_size``: the ranks' micro-batches partition the global batch,
  so N ranks with ``batch_size=B`` see exactly the windows of one process with
  ``batch_size=N*B``);
* :meth:`wrap_model`: ``DistributedDataParallel``, or FSDP2 ``fully_shard`` on each
  block (one attention + MLP pair) and at the root (the embedding, the final norm
  and the residual stream's routing parameters, which every site reads), with a
  mixed-precision policy (bf16 parameters and compute, fp32 gradient reduction)
  when the run trains in bf16;
* gradient accumulation synchronises only on the last micro-batch (DDP
  ``require_backward_grad_sync``, FSDP2 ``set_requires_gradient_sync``);
* the logged loss is the mean over ranks, the gradient norm is global;
* only rank 0 writes run files (config, metrics, TensorBoard, plot, summary);
* checkpoints are sharded through ``torch.distributed.checkpoint``
  (:mod:`mhar.train.dcp`), resumable at another world size and convertible to one
  file with ``mhar consolidate``.
"""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from mhar.train import checkpoint as ckpt
from mhar.train import dcp as dcpio
from mhar.train.config import TrainConfig
from mhar.train.errors import CheckpointError, DivergenceError
from mhar.train.trainer import Trainer, rng_state, set_rng_state

PARALLEL = ("none", "ddp", "fsdp")


# ----------------------------------------------------------------- process group

@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the process group torchrun describes (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``), or make a group of one when
    the process was started without torchrun. On CUDA each process takes GPU
    ``LOCAL_RANK``; collectives go through NCCL (CUDA tensors) and gloo (CPU)."""
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA GPU is available (use device=cpu or auto)")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPU(s) are visible: "
                             "--nproc_per_node must not exceed the GPUs per node")
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"
    if not dist.is_initialized():
        timeout = datetime.timedelta(minutes=int(os.environ.get("MHAR_DIST_TIMEOUT_MIN", 30)))
        if launched_by_torchrun():
            dist.init_process_group(backend, timeout=timeout)
        else:  # one process: a group of one, no rendezvous needed
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, backend)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s value of a picklable object on every rank."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def _all_true(flag: bool, device: torch.device) -> bool:
    t = torch.tensor([0.0 if flag else 1.0], device=device)
    dist.all_reduce(t)
    return float(t) == 0.0


# ----------------------------------------------------------------- FSDP2

def _fsdp_api():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
    except ImportError as err:  # torch < 2.6
        raise ValueError(f"parallel=fsdp needs FSDP2 (torch >= 2.6, torch.distributed.fsdp.fully_shard); "
                         f"this is torch {torch.__version__}: {err}") from err
    return fully_shard, MixedPrecisionPolicy, register_fsdp_forward_method


def apply_fsdp(model: nn.Module, param_dtype: torch.dtype | None = None, reshard_after_forward: bool = True,
               ) -> nn.Module:
    """FSDP2 on a :class:`~mhar.model.Decoder`, in place: one ``fully_shard`` group per
    block (attention + MLP sublayers), then the root, which keeps the embedding (tied
    with the LM head), the final norm and ``model.residual`` (the routing queries
    and key norms are read at every site, so they are unsharded for the whole
    forward and backward). ``param_dtype=bfloat16``: bf16 parameters and compute,
    gradients reduced in fp32. ``model.loss`` is registered as a forward method, so
    calling it directly unshards the root (``hidden_states`` is not: it runs inside
    ``loss`` and ``forward``, and a nested registration would reshard the root
    before the LM head reads the tied embedding)."""
    fully_shard, MixedPrecisionPolicy, register_forward = _fsdp_api()
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else \
        MixedPrecisionPolicy()
    subs = list(model.sublayers)
    groups = [subs[i:i + 2] for i in range(0, len(subs), 2)]
    for k, group in enumerate(groups):
        last = k == len(groups) - 1  # the last block is needed again at once by backward
        fully_shard(group if len(group) > 1 else group[0], mp_policy=mp,
                    reshard_after_forward=reshard_after_forward and not last)
    fully_shard(model, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    if hasattr(model, "loss"):
        register_forward(model, "loss")
    return model


def _local(t: Tensor) -> Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


# ----------------------------------------------------------------- the trainer

class DistributedTrainer(Trainer):
    """The :class:`Trainer` under DDP or FSDP2 (``cfg.parallel``). The process group
    must be initialised (:func:`init_distributed`); rank and world size come from it."""

    def __init__(self, cfg: TrainConfig, run_dir: str | Path, **kwargs):
        if not dist.is_initialized():
            raise RuntimeError("DistributedTrainer needs an initialised process group (call init_distributed())")
        parallel = getattr(cfg, "parallel", "ddp")
        if parallel not in ("ddp", "fsdp"):
            raise ValueError(f"parallel={parallel!r}: DistributedTrainer runs ddp or fsdp")
        self.parallel = parallel
        self._ddp: nn.Module | None = None
        self._micro = 0
        kwargs.setdefault("rank", dist.get_rank())
        kwargs.setdefault("world_size", dist.get_world_size())
        super().__init__(cfg, run_dir, **kwargs)
        dist.barrier()

    # ------------------------------------------------------------------ hooks
    def build_data(self):
        """The first process of each node builds (or caches) the dataset while the
        others wait, so no two processes write the same cache folder."""
        first = int(os.environ.get("LOCAL_RANK", self.rank)) == 0
        data, error = None, None
        if first:
            try:
                data = super().build_data()
            except Exception as err:  # still meet the others at the barrier, then fail
                error = err
        dist.barrier()
        if error is not None:
            raise error
        return data if first else super().build_data()

    def wrap_model(self, module: nn.Module) -> nn.Module:
        if self.parallel == "ddp" and self.use_graphs:
            # no DDP wrapper: the graphed step leaves this rank's gradients in one buffer and
            # sync_gradients sums it across ranks; DDP's start, rank 0's weights everywhere, is kept
            for t in [*self.model.parameters(), *self.model.buffers()]:
                dist.broadcast(t.data, src=0)
        elif self.parallel == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index if self.device.index is not None else torch.cuda.current_device()] \
                if self.device.type == "cuda" else None
            module = self._ddp = DDP(module, device_ids=ids, gradient_as_bucket_view=True)
        else:
            apply_fsdp(self.model, param_dtype=self.amp_dtype)
        return self.compile_module(module)

    def compute_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """Gradients are synchronised on the last micro-batch of a step only."""
        sync = (self._micro % self.cfg.grad_accum) == self.cfg.grad_accum - 1
        self._micro += 1
        if self.parallel == "fsdp":
            self.model.set_requires_gradient_sync(sync)
        elif self._ddp is not None:  # (graphed DDP has no wrapper: sync_gradients sums after the step)
            self._ddp.require_backward_grad_sync = sync
        return self.loss_module(x, y)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean loss over the fixed validation windows, split across ranks (rank r
        scores windows r, r+N, ...; every rank runs the same number of forward passes,
        as FSDP2's gathers need). Equals the single-process value up to summation order."""
        self.model.eval()
        val, B = self.data.val, self.cfg.batch_size
        mine = val[self.rank::self.world_size]
        per_rank = -(-val.shape[0] // self.world_size)
        total = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss sum, windows
        for start in range(0, per_rank, B):
            w = mine[start:start + B]
            rows = w.shape[0]
            w = (w if rows else val[:1]).to(self.device)  # a rank with no windows left still joins in
            with self.autocast():
                loss = self.model.loss(w[:, :-1], w[:, 1:], chunk_size=self.cfg.loss_chunk)
            if rows:
                total[0] += loss.double() * rows
                total[1] += rows
        dist.all_reduce(total)
        self.model.train()
        return float(total[0] / total[1])

    def graph_flat_gradients(self) -> bool:
        return self.parallel == "ddp"

    def graph_loss_scale(self) -> float:
        # sync_gradients sums the ranks' gradients: each rank's backward takes its share of the mean
        return super().graph_loss_scale() / (self.world_size if self.parallel == "ddp" else 1)

    def sync_gradients(self) -> None:
        if self.parallel == "ddp" and self.graphed is not None:
            dist.all_reduce(self.graphed.flat_grad)

    def reduce_loss(self, loss: Tensor) -> Tensor:
        loss = loss.detach().clone()
        dist.all_reduce(loss)  # gloo has no AVG
        return loss / self.world_size

    def clip_gradients(self, max_norm: float) -> Tensor:
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    # ------------------------------------------------------------------ run folder and checkpoints
    def last_checkpoint(self) -> Path | None:
        found = self._all_checkpoints()
        return found[-1][1] if found else None

    def _prepare_folder(self, resume: bool) -> dict[str, Any] | None:
        """As the base, with DCP checkpoint folders; a plain ``.pt`` checkpoint (from a
        single-process run or ``mhar consolidate``) resumes too. Only rank 0 writes."""
        found = self._all_checkpoints()
        if not resume:
            self._start_fresh(bool(found))
            return None
        self._check_resume_folder()
        dist.barrier()  # every rank has listed the folder before rank 0 cleans it
        if self.is_main():
            dcpio.clean_stale_tmp(self.checkpoint_dir)
            ckpt.clean_stale_tmp(self.checkpoint_dir)
        if not found:
            raise FileNotFoundError(f"cannot resume: no checkpoint in {self.checkpoint_dir}")
        step, path = found[-1]
        if path.is_dir():
            state = dcpio.load_meta(path)
            state["dcp_path"] = str(path)
        else:
            state = ckpt.load_checkpoint(path)
        from mhar.model import ModelConfig

        self.check_model_config(ModelConfig.from_dict(state["config"]["model"]))
        self.resumed_from = path
        return state

    def _meta(self) -> dict[str, Any]:
        return {
            "step": self.step, "tokens": self.tokens, "train_time": self.train_time, "evals": list(self.evals),
            "schedule": {"step": self.step, "peak_lr": self.cfg.lr, "warmup": self.cfg.warmup,
                         "total": self.cfg.steps, "min_lr_ratio": self.cfg.min_lr_ratio},
            "loader": self.data.loader.state_dict(), "config": self.cfg.to_dict(),
            "world_size": self.world_size, "parallel": self.parallel, "format": "dcp",
        }

    def state_dict(self) -> dict[str, Any]:  # the sharded state is in save_checkpoint
        return self._meta()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "dcp_path" in state:
            rng = dcpio.load(self.model, self.optimizer, state["dcp_path"])
        else:  # one full .pt file: every rank reads it and keeps its shard
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            opts = StateDictOptions(full_state_dict=True)
            named = _named_optimizer_state(self.model, self.optimizer, state["optimizer"])
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=named,
                           options=opts)
            rng = state.get("rng")
        self.step, self.tokens = int(state["step"]), int(state["tokens"])
        self.train_time = float(state.get("train_time", 0.0))
        self.evals = [tuple(e) for e in state.get("evals", [])]
        self.data.loader.load_state_dict(state["loader"])
        if rng is not None:
            set_rng_state(rng)
        self._micro = 0

    def save_checkpoint(self) -> Path | None:
        """Collective: every rank writes its shards."""
        finite = all(bool(torch.isfinite(_local(p)).all()) for p in self.model.parameters())
        if not _all_true(finite, self.device):
            raise DivergenceError(f"parameters are not finite at step {self.step}: no checkpoint written; the last "
                                  f"good checkpoint {self.last_checkpoint()} is kept")
        return dcpio.save(self.model, self.optimizer, self._meta(), rng_state(), self.checkpoint_dir, self.step,
                          self.cfg.keep_last)

    def fit(self) -> dict[str, Any]:
        summary = super().fit()
        dist.barrier()
        return summary


def _named_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, osd: dict[str, Any]) -> dict:
    """An index-keyed ``Optimizer.state_dict()`` (single-process checkpoint) in the
    name-keyed form ``set_state_dict`` takes."""
    ids = {id(p): n for n, p in model.named_parameters()}
    names = [ids[id(p)] for g in optimizer.param_groups for p in g["params"]]
    groups = []
    for g in osd["param_groups"]:
        g = dict(g)
        g["params"] = [names[i] for i in g["params"]]
        groups.append(g)
    return {"state": {names[i]: s for i, s in osd["state"].items()}, "param_groups": groups}


# ----------------------------------------------------------------- command line

def resolve_parallel(cfg: TrainConfig, flag: str | None) -> str:
    """``--parallel`` wins over the config; under torchrun with more than one process
    ``none`` becomes ``ddp`` (every process training alone would be a mistake)."""
    parallel = flag or getattr(cfg, "parallel", "none")
    if parallel not in PARALLEL:
        raise ValueError(f"--parallel={parallel!r} is not one of {', '.join(PARALLEL)}")
    if parallel == "none" and int(os.environ.get("WORLD_SIZE", 1)) > 1:
        parallel = "ddp"
    return parallel


def refuse_multi_process(command: str) -> None:
    """For commands that run in one process (``mhar compare``, ``mhar sweep``): N
    torchrun processes would each train everything into the same folders."""
    n = int(os.environ.get("WORLD_SIZE", 1))
    if n > 1:
        raise ValueError(f"mhar {command} runs in one process, not under torchrun ({n} processes); on several GPUs "
                         "train each method with `torchrun ... -m mhar train --method M --parallel ddp|fsdp`")


def train_distributed(cfg: TrainConfig, out: Path | None, *, resume: bool, quiet: bool, progress: bool) -> int:
    """Body of ``mhar train`` for ``parallel=ddp|fsdp`` (one call per process). ``quiet``:
    no resume line; ``progress``: the trainer's progress lines."""
    from mhar.train.compare import default_out
    from mhar.train.errors import TrainingError
    from mhar.train.metrics import throughput_text

    info = init_distributed(cfg.device)
    try:
        main = info.rank == 0
        if out is None:  # the ranks must agree on the folder
            out = broadcast_object(default_out(f"{cfg.preset}-{cfg.method}") if main else None)
        try:
            trainer = DistributedTrainer(cfg, out, resume=resume, quiet=not progress or not main)
            if main and trainer.resumed_from is not None and not quiet:
                print(f"resuming from {trainer.resumed_from} (step {trainer.step})", file=sys.stderr)
            s = trainer.fit()
        except TrainingError as err:
            print(f"mhar train: error (rank {info.rank}): {err}", file=sys.stderr)
            return 1
        if main:
            print(f"{s['label']}: final val loss {s['final_val_loss']:.4f}, tail-mean {s['tail_mean_val_loss']:.4f} "
                  f"(last {s['tail_k']}), {throughput_text(s)} on {info.world_size} process(es) "
                  f"({cfg.parallel}), {s['params'].get('total', 0):,} parameters")
            print(f"run folder: {out}")
        return 0
    finally:
        shutdown()


def register(subparsers) -> None:
    p = subparsers.add_parser("consolidate", help="turn a sharded (DCP) checkpoint into one .pt file",
                              description="Convert a distributed run's checkpoint folder (checkpoints/step_N/, "
                                          "written by torch.distributed.checkpoint) into one file in the "
                                          "single-process format: for sharing, analysis, or resuming on one device.")
    p.add_argument("path", help="a DCP checkpoint folder, or a run folder (its newest checkpoint)")
    p.add_argument("-o", "--out", required=True, help="the .pt file to write")
    p.set_defaults(func=cmd_consolidate)


def cmd_consolidate(args) -> int:
    path = Path(args.path)
    if Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a folder; --out names the .pt file to write")
    if not dcpio.is_dcp_checkpoint(path):
        found = dcpio.list_checkpoints(path / "checkpoints") or dcpio.list_checkpoints(path)
        if not found:
            raise FileNotFoundError(f"{path} is neither a DCP checkpoint folder nor a run folder holding one")
        path = found[-1][1]
    try:
        out = dcpio.consolidate(path, args.out)
    except CheckpointError as err:
        print(f"mhar consolidate: error: {err}", file=sys.stderr)
        return 1
    print(f"{path} -> {out}")
    return 0
