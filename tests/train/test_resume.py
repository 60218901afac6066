"""On the CPU a resumed run reproduces the uninterrupted run bit for bit."""

import pytest
import torch

from mhar.train import Trainer
from mhar.train.metrics import read_metrics


class Interrupted(Exception):
    pass


class StopAfter(Trainer):
    """Simulates a crash: raises after ``stop_at`` optimiser steps."""

    stop_at = 0

    def launch_step(self):
        if self.steps_launched == self.stop_at:
            raise Interrupted
        return super().launch_step()


def _seq(run_dir, key):
    return [r.get(key) for r in read_metrics(run_dir)]


@pytest.mark.parametrize("method, extra", [("mhar-h2", ["grad_accum=2"]), ("hyper", []),
                                           ("mhar-h2", ["adamw=triton"]), ("hyper", ["adamw=triton", "grad_accum=2"])])
def test_resume_is_bit_exact(tmp_path, small_cfg, method, extra):
    """adamw=triton: fit queues a step before it reads the last one's loss, except before an
    evaluation, a checkpoint or the end (on the CPU its update is torch's, the control flow
    the GPU's), so a crash may come with a step in flight, never logged."""
    opts = ["steps=8", "checkpoint_every=3", "eval_every=2", "keep_last=1", *extra]
    full = Trainer(small_cfg(method, *opts), tmp_path / "full", progress=False)
    full.fit()

    StopAfter.stop_at = 5  # dies after step 5; the last checkpoint is step 3 (keep_last=1)
    with pytest.raises(Interrupted):
        StopAfter(small_cfg(method, *opts), tmp_path / "cut", progress=False).fit()
    in_flight = "adamw=triton" in extra  # step 5 was queued when step 6's launch crashed
    assert _seq(tmp_path / "cut", "step") == [1, 2, 3, 4, 5][:4 if in_flight else 5]
    resumed = Trainer(small_cfg(method, *opts), tmp_path / "cut", resume=True, progress=False)
    assert resumed.step == 3 and resumed.resumed_from.name == "step_00000003.pt"
    resumed.fit()

    for key in ("step", "tokens", "loss", "grad_norm", "lr", "val_loss"):
        assert _seq(tmp_path / "full", key) == _seq(tmp_path / "cut", key), key
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert full.summary()["tail_mean_val_loss"] == resumed.summary()["tail_mean_val_loss"]


def test_resume_keeps_the_checkpoint_steps_tensorboard_scalars(tmp_path, small_cfg, monkeypatch):
    """TensorBoard drops the events a resumed run will log again, from the step after the
    checkpoint on; the checkpoint's own step (often an evaluation) is not logged again."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer import event_file_writer

    # Event files are read in name order; a name ends in a per-process count of writers, not
    # zero-padded, so in one process the 10th writer's file sorts before the 9th's. (A
    # resume is a new process, whose later start time orders its file.) Count from 0 here.
    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(0))

    opts = ["steps=4", "checkpoint_every=2", "eval_every=2"]
    StopAfter.stop_at = 3
    with pytest.raises(Interrupted):
        StopAfter(small_cfg("baseline", *opts), tmp_path, progress=False).fit()
    Trainer(small_cfg("baseline", *opts), tmp_path, resume=True, progress=False).fit()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert [e.step for e in events.Scalars("val/loss")] == [2, 4]


def test_resume_refuses_a_changed_model(tmp_path, small_cfg):
    Trainer(small_cfg("mhar-h2", "steps=2", "checkpoint_every=1"), tmp_path / "r", progress=False).fit()
    with pytest.raises(ValueError, match=r"different model config.*model.stream.heads: 2 -> 4"):
        Trainer(small_cfg("mhar-h4", "steps=2"), tmp_path / "r", resume=True, progress=False)


def test_resume_may_change_how_the_stream_is_computed(tmp_path, small_cfg):
    """The schedule, the other computation-only stream settings and the attention kernel may change on resume:
    the same model, trained on to the uninterrupted run's losses up to rounding."""
    opts = ["steps=4", "checkpoint_every=2", "eval_every=2", "stream.block_size=2"]
    Trainer(small_cfg("mhar-block", *opts), tmp_path / "full", progress=False).fit()
    StopAfter.stop_at = 2
    with pytest.raises(Interrupted):
        StopAfter(small_cfg("mhar-block", *opts), tmp_path / "r", progress=False).fit()
    changed = ["stream.schedule=two-phase", "stream.chunk=3", "stream.sum_in_product=false", "stream.phase1_min_sources=0",
               "attention_kernel=fa4"]  # SDPA on the CPU: the same function
    Trainer(small_cfg("mhar-block", *opts, *changed), tmp_path / "r", resume=True, progress=False).fit()
    assert _seq(tmp_path / "r", "step") == [1, 2, 3, 4]
    torch.testing.assert_close(_seq(tmp_path / "r", "loss"), _seq(tmp_path / "full", "loss"), rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match=r"different model config.*model.stream.block_size: 2 -> 3"):
        Trainer(small_cfg("mhar-block", *opts, "stream.block_size=3"), tmp_path / "r", resume=True, progress=False)


def _small_dataset(tmp_path):
    """A dataset folder of 300 BPE tokens built from 40 small text files."""
    data = pytest.importorskip("mhar.data")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(40):
        (corpus / f"doc{i}.txt").write_text(" ".join(f"w{(i * 7 + j) % 50}" for j in range(200)))
    return data.build_dataset([str(corpus)], tmp_path / "ds", vocab_size=300)


def test_refused_resume_keeps_the_saved_config(tmp_path, small_cfg):
    """A resume that its checkpoint refuses (here the loader's: another seed) leaves the
    run folder's config.json as it was, so a plain --resume afterwards still continues
    the run with its own settings."""
    opts = [f"data.source={_small_dataset(tmp_path)}", "steps=2", "checkpoint_every=1", "data.val_windows=1"]
    run = tmp_path / "r"
    Trainer(small_cfg("baseline", *opts), run, progress=False).fit()
    saved = (run / "config.json").read_text()
    with pytest.raises(ValueError, match="loader state: seed=0 does not match"):
        Trainer(small_cfg("baseline", *opts, "seed=7", "steps=3"), run, resume=True, progress=False)
    assert (run / "config.json").read_text() == saved
    resumed = Trainer(small_cfg("baseline", *opts, "steps=3"), run, resume=True, progress=False)
    assert resumed.step == 2
    resumed.fit()
    assert _seq(run, "step") == [1, 2, 3]


def test_resume_with_another_data_source_is_a_clear_error(tmp_path, small_cfg):
    """A checkpoint of a dataset-folder run resumed on the synthetic stream (same model), or
    the other way, is refused with a ValueError naming data.source, not a KeyError or a
    loader's 'missing version' from the other loader's state."""
    run, dataset = tmp_path / "r", _small_dataset(tmp_path)
    opts = ["steps=1", "data.val_windows=1"]
    t = Trainer(small_cfg("baseline", f"data.source={dataset}", *opts), run, progress=False)
    t.fit()
    vocab = f"data.vocab_size={t.cfg.model.vocab_size}"  # the dataset's
    with pytest.raises(ValueError, match="data.source"):
        Trainer(small_cfg("baseline", "data.source=synthetic", vocab, *opts, "steps=2"), run, resume=True,
                progress=False)
    # and the other way: a synthetic run resumed on a dataset (it said "missing version (None)")
    run = tmp_path / "s"
    Trainer(small_cfg("baseline", "data.source=synthetic", vocab, *opts), run, progress=False).fit()
    with pytest.raises(ValueError, match="trained on data.source=synthetic"):
        Trainer(small_cfg("baseline", f"data.source={dataset}", *opts, "steps=2"), run, resume=True,
                progress=False)


def test_existing_run_is_not_overwritten(tmp_path, small_cfg):
    Trainer(small_cfg("baseline", "steps=1"), tmp_path / "r", progress=False).fit()
    with pytest.raises(ValueError, match="already holds checkpoints; pass --resume"):
        Trainer(small_cfg("baseline", "steps=1"), tmp_path / "r", progress=False)


def test_resume_extends_a_finished_run(tmp_path, small_cfg):
    Trainer(small_cfg("baseline", "steps=2", "eval_every=1"), tmp_path / "r", progress=False).fit()
    t = Trainer(small_cfg("baseline", "steps=4", "eval_every=1"), tmp_path / "r", resume=True, progress=False)
    s = t.fit()
    assert s["steps"] == 4 and [e[0] for e in s["evals"]] == [1, 2, 3, 4]
    assert _seq(tmp_path / "r", "step") == [1, 2, 3, 4]


def test_load_run_model(tmp_path, small_cfg):
    from mhar.train import load_run_model

    t = Trainer(small_cfg("mhar-h2", "steps=2", "checkpoint_every=1", "keep_last=0"), tmp_path / "r",
                progress=False)
    t.fit()
    m = load_run_model(tmp_path / "r")
    assert not m.training and all(torch.equal(a, b) for a, b in zip(m.state_dict().values(),
                                                                       t.model.state_dict().values()))
    m1 = load_run_model(tmp_path / "r", checkpoint=1)
    assert not all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m.state_dict().values()))
    with pytest.raises(FileNotFoundError, match="steps available: \\[1, 2\\]"):
        load_run_model(tmp_path / "r", checkpoint=7)


def test_load_run_model_names_sharded_checkpoints(tmp_path, small_cfg):
    """A multi-process run keeps DCP checkpoint folders: the error says to consolidate them,
    not that the run has no checkpoint."""
    from mhar.train import load_run_model

    run = tmp_path / "r"
    small_cfg("mhar-h2").save(run.mkdir() or run / "config.json")
    step = run / "checkpoints" / "step_00000002"
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"")
    (step / "trainer.pt").write_bytes(b"")
    for checkpoint in (None, 2):
        with pytest.raises(FileNotFoundError, match="mhar consolidate"):
            load_run_model(run, checkpoint=checkpoint)


def test_resume_is_bit_exact_with_a_dataset_folder(tmp_path, small_cfg):
    """The same through mhar.data (a dataset folder built from a small text file)."""
    import random

    data = pytest.importorskip("mhar.data")
    rng = random.Random(0)
    words = ["the", "router", "reads", "every", "layer", "with", "heads", "depth", "softmax", "query", "of", "a"]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(100):  # documents: the validation split takes some of them
        text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) + "." for _ in range(40))
        (corpus / f"doc{i}.txt").write_text(text)
    path = data.build_dataset([str(corpus)], tmp_path / "ds", vocab_size=300)
    opts = [f"data.source={path}", "steps=6", "checkpoint_every=2", "eval_every=2"]
    full = Trainer(small_cfg("mhar-h2", *opts), tmp_path / "full", progress=False)
    assert full.cfg.model.vocab_size == 300  # from the dataset
    full.fit()
    StopAfter.stop_at = 3
    with pytest.raises(Interrupted):
        StopAfter(small_cfg("mhar-h2", *opts), tmp_path / "cut", progress=False).fit()
    Trainer(small_cfg("mhar-h2", *opts), tmp_path / "cut", resume=True, progress=False).fit()
    for key in ("loss", "grad_norm", "val_loss"):
        assert _seq(tmp_path / "full", key) == _seq(tmp_path / "cut", key), key


def test_resume_keeps_this_runs_optimiser_implementation(tmp_path, small_cfg):
    """torch's Optimizer.load_state_dict takes every group setting from the checkpoint,
    including fused / foreach: a run resumed with another implementation (adamw=torch
    after adamw=triton, or another device) keeps the one its own optimiser chose."""
    trainer = Trainer(small_cfg("mhar", "steps=1"), tmp_path, progress=False)
    chosen = [(g["fused"], g["foreach"]) for g in trainer.optimizer.param_groups]
    state = trainer.state_dict()
    for group in state["optimizer"]["param_groups"]:
        group["fused"], group["foreach"] = True, True  # as saved by a fused CUDA run
    trainer.load_state_dict(state)
    assert [(g["fused"], g["foreach"]) for g in trainer.optimizer.param_groups] == chosen


def test_fit_stopped_with_a_step_in_flight_counts_it(tmp_path, small_cfg):
    """adamw=triton: an exception while fit has a step queued ahead (here the next step's
    launch) finishes and counts that step, unlogged: ``step`` says what the weights took,
    bit for bit those of as many steps taken one at a time."""
    opts = ["adamw=triton", "steps=8", "eval_every=100", "checkpoint_every=100"]
    StopAfter.stop_at = 4  # raised launching step 5, with step 4 queued and not yet read
    cut = StopAfter(small_cfg("mhar-h2", *opts), tmp_path / "cut", progress=False)
    with pytest.raises(Interrupted):
        cut.fit()
    assert (cut.step, cut.steps_launched) == (4, 4) and _seq(tmp_path / "cut", "step") == [1, 2, 3]
    by_hand = Trainer(small_cfg("mhar-h2", *opts), tmp_path / "by_hand", progress=False)
    for _ in range(4):
        by_hand.train_step()
        by_hand.step += 1
    for (name, a), b in zip(by_hand.model.state_dict().items(), cut.model.state_dict().values()):
        assert torch.equal(a, b), name

    class StopWhileAwaited(Trainer):  # (as Ctrl-C, which mostly lands while the host waits for a step)
        stopped = False

        def finish_step(self, launched):
            if launched.index == 3 and not self.stopped:  # step 4, with step 5 queued behind it
                self.stopped = True
                raise Interrupted
            return super().finish_step(launched)

    awaited = StopWhileAwaited(small_cfg("mhar-h2", *opts), tmp_path / "awaited", progress=False)
    with pytest.raises(Interrupted):
        awaited.fit()
    assert (awaited.step, awaited.steps_launched) == (5, 5) and _seq(tmp_path / "awaited", "step") == [1, 2, 3]
    by_hand.train_step()
    for (name, a), b in zip(by_hand.model.state_dict().items(), awaited.model.state_dict().values()):
        assert torch.equal(a, b), name
