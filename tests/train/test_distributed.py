"""DDP and FSDP2 on the CPU (gloo, two processes started by torchrun): the loss
sequence equals the single-process run with the same global batch (fp32, 1e-5
relative), for every stream method, with the decoder's regions compiled, and under DDP
with the Triton AdamW's step queued ahead; sharded (DCP) checkpoints resume at another
world size, in another parallel mode, in one process, and through a consolidated
single file."""

import errno
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from train_helpers import PYTHON, SMALL, subprocess_env

from mhar.train import Trainer, TrainingError, apply_train_overrides, train_preset
from mhar.train import dcp as dcpio
from mhar.train.metrics import read_metrics

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")

RTOL = 1e-5
WORKER = Path(__file__).with_name("dist_worker.py")
# Methods run for two steps under DDP and FSDP2 each; mhar also with gradient accumulation and checkpoints.
METHODS = {
    "baseline": [],
    "hyper": ["data.val_windows=5"],  # 5 windows on 2 ranks, batch 2: rank 1 runs one empty (dummy) batch
    "attnres-block": ["stream.block_size=3"],  # blocks of 3 of the 4 sublayers: running sums
    "delta": [],
    "mhar-two-phase": ["stream.schedule=two-phase", "stream.chunk=2"],
}
LONG = ["steps=4", "grad_accum=2", "checkpoint_every=2", "eval_every=2", "keep_last=0"]
SHORT = ["steps=2", "eval_every=2", "checkpoint_every=100"]


def _cfg(method, *overrides):
    base = "mhar" if method.startswith("mhar") else method
    return apply_train_overrides(train_preset("tiny", base), SMALL + list(overrides))


def _losses(run_dir):
    return [r["loss"] for r in read_metrics(run_dir)]


def _vals(run_dir):
    return [r["val_loss"] for r in read_metrics(run_dir) if "val_loss" in r]


def _close(a, b, rtol=RTOL):
    assert len(a) == len(b), (a, b)
    for x, y in zip(a, b):
        assert abs(x - y) <= rtol * abs(y), (a, b)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Single-process references (batch 4), then one torchrun job of two ranks
    (batch 2 each) that runs every distributed scenario."""
    root = tmp_path_factory.mktemp("dist")
    torch.set_num_threads(1)
    ref = {}
    Trainer(_cfg("mhar", *LONG, "batch_size=4"), root / "ref_mhar", progress=False).fit()
    ref["mhar"] = _losses(root / "ref_mhar")
    ref["mhar_val"] = _vals(root / "ref_mhar")
    ref["mhar_norm"] = [r["grad_norm"] for r in read_metrics(root / "ref_mhar")]
    for m, extra in METHODS.items():
        Trainer(_cfg(m, *SHORT, *extra, "batch_size=4"), root / f"ref_{m}", progress=False).fit()
        ref[m] = _losses(root / f"ref_{m}")
        ref[f"{m}_val"] = _vals(root / f"ref_{m}")

    # a single-process checkpoint (step 2) to resume under FSDP2 on two ranks
    single = root / "from_single"
    shutil.copytree(root / "ref_mhar", single)
    (single / "checkpoints" / "step_00000004.pt").unlink()

    scenarios = []
    for mode in ("ddp", "fsdp"):
        scenarios.append(dict(name=f"{mode}_mhar", method="mhar", run_dir=str(root / f"{mode}_mhar"),
                              overrides=LONG + [f"parallel={mode}"]))
        for m, extra in METHODS.items():
            scenarios.append(dict(name=f"{mode}_{m}", method="mhar" if m.startswith("mhar") else m,
                                  run_dir=str(root / f"{mode}_{m}"), overrides=SHORT + extra + [f"parallel={mode}"]))
        # the CUDA defaults' compiled regions inside DDP's / FSDP2's hooks
        scenarios.append(dict(name=f"{mode}_regions", method="mhar", run_dir=str(root / f"{mode}_regions"),
                              overrides=LONG + [f"parallel={mode}", "compile=regions"]))
    # DDP's CUDA default, the Triton AdamW (its torch fallback on the CPU): fit queues a step
    # ahead, its collectives in flight; then resumed from its step-2 checkpoint
    scenarios.append(dict(name="ddp_triton", method="mhar", run_dir=str(root / "ddp_triton"),
                          overrides=LONG + ["parallel=ddp", "adamw=triton"]))
    scenarios.append(dict(name="ddp_triton_resumed", method="mhar", run_dir=str(root / "ddp_triton_resumed"),
                          resume=True, overrides=LONG + ["parallel=ddp", "adamw=triton"],
                          copy=[str(root / "ddp_triton"), "checkpoints/step_00000004"]))
    # DDP's graphed path with the graphs run eagerly (GraphedDDPOnTheCPU): rank 1 builds other
    # weights, so the broadcast of rank 0's matters; accumulation, checkpoints
    scenarios.append(dict(name="ddp_flat", method="mhar", run_dir=str(root / "ddp_flat"), eager_graphs=True,
                          overrides=LONG + ["parallel=ddp"]))
    scenarios.append(dict(name="fsdp_from_single", method="mhar", run_dir=str(single), resume=True,
                          overrides=LONG + ["parallel=fsdp"]))
    # the DDP run's step-2 checkpoint (plain tensors, written once) resumed under FSDP2 (DTensor shards)
    scenarios.append(dict(name="ddp_to_fsdp", method="mhar", run_dir=str(root / "ddp_to_fsdp"), resume=True,
                          overrides=LONG + ["parallel=fsdp"],
                          copy=[str(root / "ddp_mhar"), "checkpoints/step_00000004"]))
    out = root / "results"
    out.mkdir()
    spec = root / "spec.json"
    spec.write_text(json.dumps({"out": str(out), "scenarios": scenarios}))
    _torchrun(spec, root)
    dist = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    return root, ref, dist


def _torchrun(spec, root):
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), str(spec)]
    proc = subprocess.run(cmd, env=dict(subprocess_env(), OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_loss_equals_single_process_with_accumulation(runs, mode):
    _, ref, dist = runs
    r = dist[f"{mode}_mhar"]
    assert r["world_size"] == 2 and len(r["loss"]) == 4
    _close(r["loss"], ref["mhar"])
    _close(r["val"], ref["mhar_val"])  # validation split across the ranks


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_compiled_regions_follow_single_process(runs, mode):
    _, ref, dist = runs
    _close(dist[f"{mode}_regions"]["loss"], ref["mhar"])
    _close(dist[f"{mode}_regions"]["val"], ref["mhar_val"])


def test_ddp_graphed_path_sums_the_ranks_flat_gradients(runs):
    """parallel=ddp with cuda_graphs=on, its graphs run eagerly on the CPU: no DDP wrapper,
    rank 0's weights broadcast, each rank's gradients in one flat buffer summed by one
    all-reduce: the single-process losses."""
    _, ref, dist = runs
    r = dist["ddp_flat"]
    assert r["cuda_graphs"] and not r["ddp_wrapper"]
    _close(r["loss"], ref["mhar"])
    _close(r["val"], ref["mhar_val"])
    _close(r["grad_norm"], ref["mhar_norm"], rtol=1e-4)  # (AdamW alone hardly sees a gradient's scale)


def test_ddp_with_the_triton_adamw_follows_single_process_and_resumes(runs):
    _, ref, dist = runs
    run, resumed = dist["ddp_triton"], dist["ddp_triton_resumed"]
    assert run["adamw"] == "triton" and run["ddp_wrapper"]
    _close(run["loss"], ref["mhar"])
    assert resumed["start"] == 2
    _close(resumed["loss"], ref["mhar"])


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
@pytest.mark.parametrize("method", list(METHODS))
def test_every_stream_method(runs, mode, method):
    _, ref, dist = runs
    _close(dist[f"{mode}_{method}"]["loss"], ref[method])
    _close(dist[f"{mode}_{method}"]["val"], ref[f"{method}_val"])


def test_fsdp_shards_every_parameter_including_routing(runs):
    """FSDP2: every parameter is a DTensor shard; the routing queries and key norms
    (model.residual) are in the root group, sharded like the rest."""
    _, _, dist = runs
    r = dist["fsdp_mhar"]
    assert r["parallel"] == "fsdp"
    assert r["params"] and all(r["params"].values()), r["params"]
    assert any(n.startswith("residual.") for n in r["params"])
    assert any(n.startswith("residual.") for n in r["sharded"])


def test_fsdp_resumes_single_process_checkpoint(runs):
    _, ref, dist = runs
    r = dist["fsdp_from_single"]
    assert r["start"] == 2
    _close(r["loss"], ref["mhar"])


def test_ddp_checkpoint_resumes_under_fsdp(runs):
    _, ref, dist = runs
    r = dist["ddp_to_fsdp"]
    assert r["start"] == 2
    _close(r["loss"], ref["mhar"])


def test_sharded_checkpoint_layout(runs):
    root = runs[0]
    found = dcpio.list_checkpoints(root / "fsdp_mhar" / "checkpoints")
    assert [s for s, _ in found] == [2, 4]
    names = {p.name for p in found[0][1].iterdir()}
    assert {".metadata", "trainer.pt", "rng_0.pt", "rng_1.pt", "__0_0.distcp", "__1_0.distcp"} <= names
    assert not [p for p in (root / "fsdp_mhar" / "checkpoints").iterdir() if p.name.startswith(".")]


def test_two_process_checkpoint_resumes_in_one_process(runs, tmp_path):
    """Written by two FSDP2 ranks at step 2; resumed by one process (a group of one)
    with the same global batch: the loss sequence continues."""
    from mhar.train.distributed import DistributedTrainer, init_distributed, shutdown

    root, ref, _ = runs
    run = tmp_path / "one"
    shutil.copytree(root / "fsdp_mhar", run)
    shutil.rmtree(run / "checkpoints" / "step_00000004")
    init_distributed("cpu")
    try:
        t = DistributedTrainer(_cfg("mhar", *LONG, "batch_size=4", "parallel=fsdp"), run, resume=True,
                               progress=False)
        assert t.step == 2 and t.world_size == 1
        t.fit()
    finally:
        shutdown()
    _close(_losses(run), ref["mhar"])


def test_consolidated_checkpoint_resumes_without_process_group(runs, tmp_path, run_cli):
    """``mhar consolidate`` writes the single-process format: ``mhar train --resume`` on
    the folder it was written into (no config.json: the file's own config, parallel=none)
    runs in one process and continues the loss sequence."""
    root, ref, _ = runs
    run = tmp_path / "single"
    run.mkdir()
    shutil.copy(root / "fsdp_mhar" / "metrics.jsonl", run / "metrics.jsonl")  # the losses before step 2
    code, out, err = run_cli("consolidate", root / "fsdp_mhar" / "checkpoints" / "step_00000002",
                             "--out", run / "checkpoints" / "step_00000002.pt")
    assert code == 0, err
    state = torch.load(run / "checkpoints" / "step_00000002.pt", weights_only=False)
    assert state["step"] == 2 and "embed.weight" in state["model"] and state["config"]["parallel"] == "none"
    assert all(not hasattr(v, "to_local") for v in state["model"].values())
    code, out, err = run_cli("train", "--resume", "--quiet", "--out", run, "batch_size=4")
    assert code == 0, err
    assert "config.json does not exist; using the config saved in" in err and "(none)" not in out
    assert json.loads((run / "config.json").read_text())["parallel"] == "none"
    _close(_losses(run), ref["mhar"])


def test_consolidate_refuses_non_checkpoint(tmp_path, run_cli):
    code, out, err = run_cli("consolidate", tmp_path, "--out", tmp_path / "x.pt")
    assert code == 2 and "neither a DCP checkpoint" in err
    code, out, err = run_cli("consolidate", tmp_path, "--out", tmp_path)  # a folder, not the file to write
    assert code == 2 and "is a folder; --out names the .pt file" in err


def test_parallel_config_validation():
    with pytest.raises(ValueError, match="parallel='tp'"):
        _cfg("baseline", "parallel=tp")


def test_synthetic_loader_ranks_partition_the_global_batch():
    from mhar.train.data import SyntheticLoader, synthetic_tokens

    tokens = synthetic_tokens(64, 4096, seed=1)
    one = SyntheticLoader(tokens, 16, 6, seed=3)
    ranks = [SyntheticLoader(tokens, 16, 2, seed=3, rank=r, world_size=3) for r in range(3)]
    for _ in range(3):
        x1, y1 = one.next_batch()
        parts = [loader.next_batch() for loader in ranks]
        assert torch.equal(x1, torch.cat([p[0] for p in parts]))
        assert torch.equal(y1, torch.cat([p[1] for p in parts]))


def test_torchrun_cli_rank0_writes_run_files(tmp_path):
    """``torchrun --nproc_per_node=2 -m mhar train --parallel ddp``: one run folder,
    written by rank 0 (one metrics row per step, one summary line), sharded
    checkpoints from both ranks; ``--resume`` continues it."""
    out = tmp_path / "run"
    base = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "mhar", "train",
            "--method", "mhar", "--parallel", "ddp", "--quiet", "--out", str(out), *SMALL, "eval_every=2"]
    env = dict(subprocess_env(), OMP_NUM_THREADS="1")
    proc = subprocess.run(base + ["steps=2"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert proc.stdout.count("final val loss") == 1 and "on 2 process(es) (ddp)" in proc.stdout
    assert [r["step"] for r in read_metrics(out)] == [1, 2]
    assert json.loads((out / "config.json").read_text())["parallel"] == "ddp"
    assert (out / "summary.json").exists() and len(list((out / "tb").iterdir())) == 1
    assert [s for s, _ in dcpio.list_checkpoints(out / "checkpoints")] == [2]
    proc = subprocess.run(base + ["steps=3", "--resume"], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3]


def test_optimizer_state_name_index_round_trip():
    """Index-keyed AdamW state (single-process .pt) <-> name-keyed (DCP), with the
    two param groups of decay_all=false."""
    from mhar.model import Decoder
    from mhar.train.distributed import _named_optimizer_state
    from mhar.train.optim import build_optimizer

    cfg = _cfg("mhar", "decay_all=false")
    model = Decoder(cfg.model)
    opt = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), decay_all=False)
    assert len(opt.param_groups) == 2
    model.loss(torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8))).backward()
    opt.step()
    osd = opt.state_dict()
    named = _named_optimizer_state(model, opt, osd)
    assert set(named["state"]) <= {n for n, _ in model.named_parameters()}
    back = dcpio._index_optimizer_state(named)
    assert [g["params"] for g in back["param_groups"]] == [g["params"] for g in osd["param_groups"]]
    for i, s in osd["state"].items():
        assert all(torch.equal(s[k], back["state"][i][k]) for k in s)


def test_compare_refuses_torchrun(monkeypatch, run_cli):
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, out, err = run_cli("compare", "--methods", "baseline", *SMALL)
    assert code == 2 and "runs in one process" in err


def test_single_process_run_refuses_a_folder_with_sharded_checkpoints(tmp_path):
    """A new one-process run in the folder of a multi-process run (DCP checkpoint folders,
    no .pt files) is refused, as for a folder holding .pt checkpoints: it would overwrite
    that run's config and metrics and mix its checkpoints with the new run's."""
    from mhar.train.distributed import DistributedTrainer, init_distributed, shutdown

    run = tmp_path / "run"
    init_distributed("cpu")  # a group of one writes a real sharded checkpoint
    try:
        DistributedTrainer(_cfg("baseline", "steps=1", "parallel=ddp"), run, progress=False).fit()
    finally:
        shutdown()
    assert [s for s, _ in dcpio.list_checkpoints(run / "checkpoints")] == [1]
    metrics = (run / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="already holds checkpoints; pass --resume"):
        Trainer(_cfg("baseline", "steps=1"), run, progress=False)
    with pytest.raises(FileNotFoundError, match="only a multi-process run's sharded checkpoints.*consolidate"):
        Trainer(_cfg("baseline", "steps=2"), run, resume=True, progress=False)
    assert (run / "metrics.jsonl").read_text() == metrics
    assert json.loads((run / "config.json").read_text())["parallel"] == "ddp"


def test_full_disk_during_a_sharded_checkpoint(tmp_path, monkeypatch):
    """A write that fails inside DCP (torch.save's zip writer on a full disk, as a real one
    fails: a RuntimeError whose context is the OSError, which DCP's gathered failure does
    not keep) is one TrainingError naming the checkpoint, the error and the disk's free
    space; the temporary folder is removed and the earlier checkpoint kept."""
    from mhar.train.distributed import DistributedTrainer, init_distributed, shutdown

    real = torch.save
    run = tmp_path / "run"

    def filling_disk(obj, f, *a, **k):
        if (run / "checkpoints" / ".step_00000002.tmp").exists():  # the disk fills up at step 2's checkpoint
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        return real(obj, f, *a, **k)

    init_distributed("cpu")
    try:
        t = DistributedTrainer(_cfg("baseline", "steps=2", "checkpoint_every=1", "parallel=ddp"), run,
                               progress=False)
        monkeypatch.setattr(torch, "save", filling_disk)
        with pytest.raises(TrainingError, match=r"could not write checkpoint .*step_00000002 \(RuntimeError: "
                                                r".*unexpected pos.* MiB free on its disk\); earlier"):
            t.fit()
    finally:
        shutdown()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000001"]


def test_keep_last_counts_one_process_checkpoints_too(tmp_path):
    """A one-process run resumed under torchrun: keep_last prunes its older .pt files along
    with the sharded folders, oldest first."""
    from mhar.train.distributed import DistributedTrainer, init_distributed, shutdown

    run = tmp_path / "run"
    Trainer(_cfg("baseline", "steps=2", "checkpoint_every=1", "keep_last=0"), run, progress=False).fit()
    init_distributed("cpu")
    try:
        DistributedTrainer(_cfg("baseline", "steps=4", "checkpoint_every=1", "keep_last=2", "parallel=ddp"), run,
                           resume=True, progress=False).fit()
    finally:
        shutdown()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000003", "step_00000004"]
