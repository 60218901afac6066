"""The CLI and the report on the run folders of a tiny comparison, trained here."""

import json
import math
import re

import pytest

from mhar.cli import main

METHODS = ["baseline", "attnres", "mhar-h2", "mhar-h4"]
OVERRIDES = ["data.source=synthetic", "data.vocab_size=64", "model.d_model=32", "model.n_layers=2",
             "model.n_heads=2", "model.n_kv_heads=1", "model.d_ff=64", "steps=12", "batch_size=4", "seq_len=32",
             "eval_every=3", "warmup=2", "checkpoint_every=100", "data.val_windows=8", "tail_k=2", "lr=1e-2",
             "threads=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from mhar.train import Trainer, apply_train_overrides, train_preset

    root = tmp_path_factory.mktemp("compare")
    for m in METHODS:
        cfg = apply_train_overrides(train_preset("tiny", m), OVERRIDES)
        Trainer(cfg, root / m, quiet=True, progress=False).fit()
    return root


def test_probe_cli_on_a_trained_single_head_run(runs, capsys):
    assert main(["probe", str(runs / "attnres"), "--windows", "4", "--draws", "4"]) == 0
    out = capsys.readouterr().out
    assert "KL(slice || shared)" in out and "learned excess" in out and "overall" in out
    data = json.loads((runs / "attnres" / "analysis" / "probe.json").read_text())
    assert data["kind"] == "slices" and data["slices"] == 4 and data["tokens"] == 4 * 32
    assert len(data["sites"]) == 5  # 4 sublayers + the final read
    o = data["overall"]
    assert math.isclose(o["excess"], o["learned"] - o["null"], rel_tol=1e-9, abs_tol=1e-12)
    assert o["learned"] > 0  # trained queries moved off zero: the reads are no longer uniform


def test_probe_cli_on_a_multi_head_run(runs, capsys):
    assert main(["probe", str(runs / "mhar-h4"), "--windows", "2", "--draws", "2", "--out",
                 str(runs / "probe-h4")]) == 0
    data = json.loads((runs / "probe-h4" / "probe.json").read_text())
    assert data["kind"] == "heads" and data["heads"] == 4
    assert len(data["correlation_matrix"]) == 4 and all(len(s["head_deviation"]) == 4 for s in data["sites"])


def test_maps_cli_rows_sum_to_one(runs, capsys):
    assert main(["maps", str(runs / "mhar-h2"), "--windows", "3"]) == 0
    folder = runs / "mhar-h2" / "analysis"
    assert (folder / "maps.png").read_bytes()[:4] == b"\x89PNG"
    m = json.loads((folder / "maps.json").read_text())
    assert len(m["weights"]) == 2 and m["sites"][-1] == "final" and m["tokens"] == 3 * 32
    for head in m["weights"]:
        for i, row in enumerate(head):
            avail = [v for v in row if v is not None]
            assert len(avail) == i + 1  # full routing: site i reads i + 1 sources
            assert math.isclose(sum(avail), 1.0, rel_tol=1e-6)  # fp32 weights


def test_baseline_has_nothing_to_probe(runs, capsys):
    assert main(["probe", str(runs / "baseline"), "--windows", "1"]) == 2
    assert "no routing sites" in capsys.readouterr().err
    assert main(["maps", str(runs / "nope")]) == 2


def test_report_from_a_tiny_comparison(runs, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out), "--windows", "2", "--draws", "2"]) == 0
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for m in METHODS:
        assert f"| {m} |" in md
    # the table's numbers are the trainer's own tail-means
    for m in METHODS:
        summary = json.loads((runs / m / "summary.json").read_text())
        row = next(line for line in md.splitlines() if line.startswith(f"| {m} |"))
        assert f"{summary['tail_mean_val_loss']:.4f}" in row
    assert re.search(r"\| mhar-h2 \| MHAR H=2 \|.*\| [+-]\d\.\d{4} \|", md)  # difference to the baseline
    for img in ("loss_curves.png", "h_sweep.png", "map_attnres.png", "map_mhar-h2.png", "map_mhar-h4.png"):
        assert (out / "img" / img).read_bytes()[:4] == b"\x89PNG"
        assert f"img/{img}" in md
    assert "## H sweep" in md and "| tiny d=32 L=2, full routing, 12 steps | 4 |" in md
    assert "KL(slice || shared)" in md and "KL(head || head consensus)" in md
    assert html.count("data:image/png;base64,") == 5 and "<table>" in html and "img/" not in html
    err = capsys.readouterr().err  # a line as each routed run's analysis starts (they take a while)
    assert "mhar report: mhar-h2: probe and maps" in err and "mhar report: baseline" not in err


def test_report_without_checkpoint_analysis(runs, tmp_path):
    out = tmp_path / "r2"
    assert main(["report", str(runs / "baseline"), str(runs / "attnres"), "--out", str(out), "--no-probe",
                 "--no-maps"]) == 0
    md = (out / "report.md").read_text()
    assert "Probe not computed" in md and "Not drawn" in md


def test_report_notes_a_routed_run_without_checkpoint(runs, tmp_path):
    import shutil

    young = tmp_path / "young"
    shutil.copytree(runs / "attnres", young, ignore=shutil.ignore_patterns("*.pt"))
    out = tmp_path / "r3"
    assert main(["report", str(young), "--out", str(out), "--windows", "1", "--draws", "1"]) == 0
    assert "young: not analysed" in (out / "report.md").read_text()


def test_report_pairs_only_runs_with_the_same_setup(runs, tmp_path):
    import shutil

    other = tmp_path / "other-seed"
    shutil.copytree(runs / "mhar-h2", other, ignore=shutil.ignore_patterns("*.pt", "analysis"))
    cfg = json.loads((other / "config.json").read_text())
    cfg["seed"] = 1
    (other / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "r4"
    assert main(["report", str(runs / "baseline"), str(runs / "mhar-h4"), str(other), "--out", str(out),
                 "--no-probe", "--no-maps"]) == 0
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| other-seed |"))
    assert row.split("|")[8].strip() == ""  # no paired baseline: no difference shown
    row = next(line for line in md.splitlines() if line.startswith("| mhar-h4 |"))
    assert re.match(r"[+-]\d\.\d{4}", row.split("|")[8].strip())
    assert "Not drawn" in md  # H = 2 and H = 4 here come from different setups


def test_h_sweep_keeps_block_routing_apart_from_full_routing(runs, tmp_path):
    """A block-routed run of the same setup is not averaged into the full-routing curve
    (the group key holds the block size, as the label says)."""
    import shutil

    from mhar.analysis.report import h_sweep
    from mhar.analysis.runs import summarize_run

    block = tmp_path / "mhar-h4-block"
    shutil.copytree(runs / "mhar-h4", block, ignore=shutil.ignore_patterns("*.pt", "analysis"))
    cfg = json.loads((block / "config.json").read_text())
    cfg["model"]["stream"]["block_size"] = 2
    (block / "config.json").write_text(json.dumps(cfg))
    series = h_sweep([summarize_run(p) for p in (runs / "attnres", runs / "mhar-h2", runs / "mhar-h4", block)])
    assert list(series) == ["tiny d=32 L=2, full routing, 12 steps"]  # the block run's group has one H
    assert [name for _, _, name in series["tiny d=32 L=2, full routing, 12 steps"]] == ["attnres", "mhar-h2",
                                                                                         "mhar-h4"]


def _saved_hf_model(folder):
    pytest.importorskip("transformers")
    from mhar.model import get_preset
    from mhar.model.hf import MharConfig, MharForCausalLM

    cfg = get_preset("tiny", "mhar-h2")
    cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.d_ff = 64, 32, 1, 64
    MharForCausalLM(MharConfig.from_model_config(cfg)).save_pretrained(folder)
    return folder


def test_report_skips_saved_model_folders(runs, tmp_path):
    """A Hugging Face model folder beside the runs (mhar midtrain's OUT/converted, a run's
    hf/) has a config.json too, but it is not a run: no '?' row with a made-up size."""
    import shutil

    mix = tmp_path / "mix"
    for m in ("baseline", "attnres"):
        shutil.copytree(runs / m, mix / m, ignore=shutil.ignore_patterns("*.pt", "analysis"))
    _saved_hf_model(mix / "converted")
    out = tmp_path / "r5"
    assert main(["report", str(mix), "--out", str(out), "--no-probe", "--no-maps"]) == 0
    md = (out / "report.md").read_text()
    assert "| baseline |" in md and "| attnres |" in md
    assert "| converted |" not in md and "2 run folder(s)" in md


def test_probe_of_a_saved_model_folder_says_what_it_is(tmp_path, capsys):
    folder = _saved_hf_model(tmp_path / "hf")
    assert main(["probe", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "Hugging Face model folder" in err and "not a run folder" in err


def test_h_sweep_draws_a_delta_sweep(runs, tmp_path):
    """`mhar sweep --method delta` trains delta runs over H: the report draws their
    curve, apart from the routed runs' (it left delta runs out: 'Not drawn')."""
    import shutil

    from mhar.analysis.report import h_sweep
    from mhar.analysis.runs import summarize_run

    folders = []
    for h, src in ((2, "mhar-h2"), (4, "mhar-h4")):
        folder = tmp_path / f"delta-h{h}"
        shutil.copytree(runs / src, folder, ignore=shutil.ignore_patterns("*.pt", "analysis"))
        cfg = json.loads((folder / "config.json").read_text())
        cfg["model"]["stream"].update(method="delta", block_size=2)
        (folder / "config.json").write_text(json.dumps(cfg))
        folders.append(folder)
    series = h_sweep([summarize_run(p) for p in [runs / "attnres", runs / "mhar-h2", *folders]])
    assert set(series) == {"tiny d=32 L=2, full routing, 12 steps", "tiny d=32 L=2, delta S=2, 12 steps"}
    assert [(h, name) for h, _, name in series["tiny d=32 L=2, delta S=2, 12 steps"]] == [(2, "delta-h2"),
                                                                                         (4, "delta-h4")]


def test_h_sweep_draws_a_shared_baseline_once(runs, tmp_path):
    """Full and block routing of one setup are two curves with one baseline: one dashed
    line, not one per curve (two identical lines and legend entries)."""
    import shutil

    from mhar.analysis.report import baseline_lines, h_sweep
    from mhar.analysis.runs import summarize_run

    summaries = [summarize_run(runs / m) for m in ("baseline", "attnres", "mhar-h2")]
    for h, src in ((2, "mhar-h2"), (4, "mhar-h4")):
        folder = tmp_path / f"block-h{h}"
        shutil.copytree(runs / src, folder, ignore=shutil.ignore_patterns("*.pt", "analysis"))
        cfg = json.loads((folder / "config.json").read_text())
        cfg["model"]["stream"]["block_size"] = 2
        (folder / "config.json").write_text(json.dumps(cfg))
        summaries.append(summarize_run(folder))
    series = h_sweep(summaries)
    assert len(series) == 2
    lines = baseline_lines(series, summaries)
    assert lines == [(summaries[0].tail_mean, "baseline (baseline)")]


def _saved_figures(monkeypatch):
    """The figures the code under test saves, kept for inspection (their lines, labels, limits)."""
    from matplotlib.figure import Figure

    saved, real = [], Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return real(fig, *args, **kwargs)
    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_a_method_has_one_colour_in_every_plot(runs, tmp_path, monkeypatch):
    """compare's curves.png lists the methods in the command's order, the report in its folders'
    (sorted) order: the colour follows the method, not the position, so baseline is the same
    colour in both (it was blue in one and orange in the other)."""
    from mhar.analysis.report import plot_loss_curves
    from mhar.analysis.runs import summarize_run
    from mhar.train.metrics import plot_runs

    saved = _saved_figures(monkeypatch)
    plot_runs({m: runs / m for m in METHODS}, tmp_path / "curves.png")
    plot_loss_curves([summarize_run(runs / m) for m in sorted(METHODS)], tmp_path / "loss.png")
    curves, report = saved

    def colours(ax, strip=lambda label: label):
        return {strip(line.get_label()): line.get_color() for line in ax.get_lines()
                if not line.get_label().startswith("_")}
    a = colours(curves.axes[0])
    b = colours(report.axes[0], strip=lambda label: label.split(" (")[0])
    assert set(a) == set(b) == set(METHODS) and a == b
    assert len(set(a.values())) == len(METHODS)


def test_report_has_mfu_where_a_run_has_one(runs, tmp_path):
    """A run trained on a GPU of known peak has an MFU in its summary: the table gets the
    column, and "n/a" for runs without one (the CPU's, as here until one is edited in)."""
    import shutil

    gpu = tmp_path / "gpu-run"
    shutil.copytree(runs / "mhar-h2", gpu, ignore=shutil.ignore_patterns("*.pt", "analysis"))
    summary = json.loads((gpu / "summary.json").read_text())
    assert summary["mfu"] is None  # trained on the CPU, no peak given
    (gpu / "summary.json").write_text(json.dumps({**summary, "mfu": 0.412}))
    for folders, column in (([runs / "baseline"], False), ([runs / "baseline", gpu], True)):
        out = tmp_path / f"r-{column}"
        assert main(["report", *map(str, folders), "--out", str(out), "--no-probe", "--no-maps"]) == 0
        md = (out / "report.md").read_text()
        head = next(line for line in md.splitlines() if line.startswith("| run |"))
        assert head.rstrip(" |").endswith("MFU") == column
        if column:
            assert next(line for line in md.splitlines() if line.startswith("| gpu-run |")).endswith("| 41.2% |")
            assert next(line for line in md.splitlines() if line.startswith("| baseline |")).endswith("| n/a |")
