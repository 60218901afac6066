"""`mhar bench step` at tiny shapes (on the CPU in CI, graphed on a GPU): every method in
one run, ratios against the baseline, JSON, Markdown and the ratio plot written;
--cuda-graphs on refuses without a GPU."""

import json

import pytest
import torch

from mhar.cli import main


def test_bench_step_writes_table_json_and_plot(tmp_path, monkeypatch):
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    from mhar.train.metrics import method_colours

    figures, savefig = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), savefig(fig, *a, **k))[1])
    rc = main(["bench", "step", "--preset", "tiny", "--methods", "baseline,mhar,mhar-block@two-phase", "--steps", "1",
               "--warmup", "1", "--compile", "off", "--out", str(tmp_path), "--tag", "t", "n_layers=2", "d_model=64",
               "n_heads=2", "n_kv_heads=1", "d_ff=128", "vocab_size=256"])
    assert rc == 0
    results = json.loads((tmp_path / "step_t.json").read_text())["results"]
    assert [r["method"] for r in results] == ["baseline", "mhar", "mhar-block@two-phase"]
    assert results[0]["throughput_vs_baseline"] == 1.0
    on_gpu = torch.cuda.is_available()  # there the default replays each step from a CUDA graph
    assert all(r["tokens_per_s"] > 0 and r["cuda_graphs"] == on_gpu for r in results)
    md = (tmp_path / "step_t.md").read_text()
    graph = " (graph)" if on_gpu else ""
    assert f"| tiny | mhar-block@two-phase{graph} |" in md and "| SM MHz, median (p10) | W |" in md
    if not on_gpu:  # no GPU: no clock, and no peak memory nor its ratio ("-", not "nan")
        rows = [row.split(" | ") for row in md.splitlines() if row.startswith("| tiny |")]
        assert all(cells[6] == cells[8] == cells[9] == "-" and cells[10] == "- |" for cells in rows)
    assert (tmp_path / "step_t.png").stat().st_size > 10_000
    # the bars take each method's colour in compare's and the report's plots (mhar-block@two-phase: mhar-block's)
    tput, mem = figures[-1].axes[:2]
    got = [to_hex(bars.patches[0].get_facecolor()) for bars in tput.containers]
    assert got == [to_hex(c) for c in method_colours(["baseline", "mhar", "mhar-block"])]
    if not on_gpu:  # no peak-memory counter: the empty panel says why
        assert [t.get_text() for t in mem.texts] == ["not measured on this device"]


def test_bench_step_with_the_triton_adamw(tmp_path):
    # on the CPU without the interpreter its step is torch's (the kernel's own tests are
    # tests/core/test_adamw_kernel.py); here the option runs end to end and is recorded
    rc = main(["bench", "step", "--preset", "tiny", "--methods", "baseline", "--steps", "1", "--warmup", "1",
               "--compile", "off", "--adamw", "triton", "--out", str(tmp_path), "--tag", "a", "n_layers=2",
               "d_model=64", "n_heads=2", "n_kv_heads=1", "d_ff=128", "vocab_size=256"])
    assert rc == 0
    data = json.loads((tmp_path / "step_a.json").read_text())
    assert data["meta"]["adamw"] == "triton" and data["results"][0]["tokens_per_s"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_bench_step_cuda_graphs_needs_a_gpu(tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        main(["bench", "step", "--preset", "tiny", "--methods", "baseline", "--cuda-graphs", "on",
              "--out", str(tmp_path)])


def test_bench_step_fails_a_row_that_would_run_uncompiled(tmp_path):
    """Past torch.compile's budget of variants a function runs uncompiled; the bench
    must not time that as a compiled step. With a budget of one, the baseline's
    attention sublayer (called without and with the fused residual) exceeds it."""
    # config.patch, not monkeypatch: recompile_limit is an alias in torch's config module,
    # and monkeypatch's undo left it unreadable, failing every later compile in the process
    with torch._dynamo.config.patch(recompile_limit=1):
        rc = main(["bench", "step", "--preset", "tiny", "--methods", "baseline", "--steps", "1", "--warmup", "1",
                   "--compile", "regions", "--out", str(tmp_path), "--tag", "t", "n_layers=2", "d_model=64",
                   "n_heads=2", "n_kv_heads=1", "d_ff=128", "vocab_size=256"])
    torch._dynamo.reset()
    results = json.loads((tmp_path / "step_t.json").read_text())["results"]
    assert rc == 0 and "recompile_limit" in results[0]["error"], results


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's note")
def test_bench_step_says_a_paper_preset_runs_on_the_cpu(tmp_path, capsys):
    """Without a GPU a paper preset still runs (here shrunk by overrides), after a note
    that it runs on the CPU and how to check the bench quickly; tiny gets no note."""
    args = ["bench", "step", "--methods", "baseline", "--steps", "1", "--warmup", "1", "--compile", "off",
            "--batch", "1", "--seq-len", "16", "--out", str(tmp_path), "n_layers=1", "d_model=64", "n_heads=2",
            "n_kv_heads=1", "d_ff=128", "vocab_size=256"]
    assert main([*args[:2], "--preset", "paper-350m", *args[2:]]) == 0
    err = capsys.readouterr().err
    assert "no CUDA device, so paper-350m runs on the CPU" in err and "--preset tiny" in err
    assert main([*args[:2], "--preset", "tiny", *args[2:]]) == 0
    assert "runs on the CPU" not in capsys.readouterr().err


def test_bench_step_accumulates_microbatches(tmp_path):
    """--accum N: a step is N microbatches and one update, and tokens/s counts all of
    them; the recipe's accumulation is the paper's global batch over its microbatch."""
    from mhar.bench_cli import recipe_accum

    assert [recipe_accum(p, b) for p, b in (("paper-100m", 8), ("paper-350m", 16), ("paper-1b", 16))] == [8, 2, 2]
    assert recipe_accum("tiny", 4) == 1
    with pytest.raises(ValueError, match="not a multiple"):
        recipe_accum("paper-1b", 12)
    rc = main(["bench", "step", "--preset", "tiny", "--methods", "baseline", "--steps", "1", "--warmup", "1",
               "--compile", "off", "--accum", "3", "--out", str(tmp_path), "--tag", "acc", "n_layers=2",
               "d_model=64", "n_heads=2", "n_kv_heads=1", "d_ff=128", "vocab_size=256"])
    assert rc == 0
    r = json.loads((tmp_path / "step_acc.json").read_text())["results"][0]
    assert r["accum"] == 3
    assert r["tokens_per_s"] == pytest.approx(r["batch"] * r["seq_len"] * 3 / (r["step_ms"] / 1e3))
    assert "| 4x128x3 |" in (tmp_path / "step_acc.md").read_text()


TINY = ["n_layers=2", "d_model=64", "n_heads=2", "n_kv_heads=1", "d_ff=128", "vocab_size=256"]


def test_bench_step_checks_every_preset_and_method_before_timing(tmp_path, monkeypatch, capsys):
    """A bad preset, method, setting or --accum in any position fails before the first
    method is timed (at the paper's sizes that would be minutes of wasted timing)."""
    import mhar.bench_cli as bench_cli

    timed = []
    monkeypatch.setattr(bench_cli, "time_step", lambda *a, **k: timed.append(a) or {})
    cases = [(["--methods", "baseline,mhar,bogus"], "unknown method 'bogus'"),
             (["--methods", "baseline,mhar+stream.nope=1"], "unknown config key 'stream.nope'"),
             (["--methods", "baseline,mhar@sideways"], "unknown schedule"),
             (["--preset", "tiny,paper-9b"], "unknown preset 'paper-9b'"),
             (["--accum", "two"], "--accum takes a positive whole number")]
    for extra, message in cases:
        argv = ["bench", "step", "--preset", "tiny", "--methods", "baseline", "--compile", "off",
                "--out", str(tmp_path / "never"), *extra, *TINY]
        try:  # (a ValueError is main's one-line error; a bad option's value exits with its message)
            rc, err = main(argv), capsys.readouterr().err
        except SystemExit as exit_:
            rc, err = 2, str(exit_.code)
        assert rc == 2 and message in err, (extra, err)
        assert timed == [] and not (tmp_path / "never").exists()


def test_bench_step_global_batch_is_the_trainer_presets(tmp_path):
    """--batch global: the paper's global batch as one microbatch, which is what the
    trainer's presets run; the default is the issue's reference microbatch."""
    from mhar.bench_cli import microbatch
    from mhar.train.config import TRAIN_PRESETS

    for preset in ("paper-100m", "paper-350m", "paper-1b"):
        assert microbatch(preset, "global") == TRAIN_PRESETS[preset]["batch_size"]
    assert [microbatch(p, "") for p in ("paper-100m", "paper-350m", "paper-1b", "tiny")] == [8, 16, 16, 4]
    assert (microbatch("tiny", "global"), microbatch("paper-1b", "12")) == (4, 12)
    for bad in ("0", "-2", "all"):
        with pytest.raises(SystemExit, match="--batch"):
            microbatch("tiny", bad)
    rc = main(["bench", "step", "--preset", "tiny", "--methods", "baseline", "--steps", "1", "--warmup", "1",
               "--compile", "off", "--batch", "2", "--out", str(tmp_path), "--tag", "b", *TINY])
    assert rc == 0 and json.loads((tmp_path / "step_b.json").read_text())["results"][0]["batch"] == 2


def test_bench_step_argv_round_trip():
    """--processes reruns the benchmark from the parsed options: each option comes back
    as given, and a child differs only in its own tag and process count."""
    from mhar.bench_cli import step_argv
    from mhar.cli import build_parser

    parser = build_parser()
    given = ["bench", "step", "--preset", "tiny,paper-100m", "--methods", "baseline,mhar@two-phase", "--batch", "3",
             "--accum", "recipe", "--steps", "2", "--compile", "off", "--activation-checkpointing",
             "--adamw", "torch", "--loss-chunk", "0", "--out", "/tmp/x", "--tag", "t", "--processes", "4", *TINY]
    args = parser.parse_args(given)
    again = parser.parse_args(["bench", "step", *step_argv(args)])
    assert vars(again) == vars(args)
    child = parser.parse_args(["bench", "step", *step_argv(args, processes=1, tag="t_p2")])
    assert (child.processes, child.tag) == (1, "t_p2")
    assert {k: v for k, v in vars(child).items() if k not in ("processes", "tag")} == \
        {k: v for k, v in vars(args).items() if k not in ("processes", "tag")}


def test_bench_step_in_fresh_processes(tmp_path, capsys):
    """--processes 2: the benchmark twice, each in its own process, then every row's
    median and range over the two."""
    rc = main(["bench", "step", "--preset", "tiny", "--methods", "baseline,mhar", "--steps", "1", "--warmup", "1",
               "--compile", "off", "--out", str(tmp_path), "--tag", "s", "--processes", "2", *TINY])
    assert rc == 0
    runs = [json.loads((tmp_path / f"step_s_p{k}.json").read_text())["results"] for k in (1, 2)]
    spread = json.loads((tmp_path / "step_s.json").read_text())
    assert spread["meta"]["processes"] == 2 and spread["meta"]["runs"] == ["step_s_p1.json", "step_s_p2.json"]
    assert spread["meta"]["command"].startswith("mhar bench step --preset tiny --methods baseline,mhar")
    for i, row in enumerate(spread["results"]):
        times = [run[i]["step_ms"] for run in runs]
        assert row["method"] == runs[0][i]["method"] and row["processes"] == 2
        assert row["step_ms_min"] == min(times) and row["step_ms_max"] == max(times)
        assert row["step_ms"] == pytest.approx(sum(times) / 2)  # the median of two
        ratios = [run[i]["throughput_vs_baseline"] for run in runs]
        assert row["throughput_vs_baseline"] == pytest.approx(sum(ratios) / 2)
    md = (tmp_path / "step_s.md").read_text()
    assert "2 processes: median (min-max)" in md and "| tiny | mhar" in md  # "mhar (graph)" on CUDA
    tokens = sorted(run[0]["tokens_per_s"] for run in runs)  # the baseline row's tokens/s: median (min-max)
    assert f"| {sum(tokens) / 2:,.0f} ({tokens[0]:,.0f}-{tokens[1]:,.0f}) |" in md
    assert main(["bench", "step", "--preset", "tiny", "--processes", "0", "--out", str(tmp_path)]) == 2
    assert "--processes must be at least 1" in capsys.readouterr().err


def test_bar_lines():
    """The rows against issue 6's bars: each bar a row measures, met or not at its edge;
    no lines for rows without a GPU (no memory ratio), other presets or failed rows."""
    from mhar.bench_cli import bar_lines

    def row(method, preset="paper-350m", **numbers):
        return {"preset": preset, "method": method, "batch": 16, "seq_len": 1024, "accum": 1, "cuda_graphs": True,
                "memory_vs_baseline": 1.0, **numbers}

    results = [row("baseline", mfu=0.50, step_ms=100.0), row("hyper", throughput_vs_baseline=0.8,
                                                              memory_vs_baseline=1.051, step_ms=125.0),
               row("attnres", throughput_vs_baseline=0.85, memory_vs_baseline=1.01, step_ms=118.0),
               row("mhar", throughput_vs_baseline=0.899, memory_vs_baseline=1.05, step_ms=121.54),
               row("mhar-block", throughput_vs_baseline=0.97, memory_vs_baseline=1.0, step_ms=103.0),
               row("baseline", preset="paper-100m", mfu=0.399, step_ms=30.0),
               row("mhar", preset="tiny", throughput_vs_baseline=0.5, step_ms=1.0),
               row("baseline", preset="paper-1b", mfu=0.6, memory_vs_baseline=float("nan")),
               {**row("mhar", preset="paper-1b"), "error": "RuntimeError: out of memory"}]
    lines = bar_lines(results)
    table = {tuple(c.strip() for c in line.split("|")[1:-1]) for line in lines if line.startswith("| paper")}
    graph, b = " (graph)", "16x1024x1"
    assert table == {
        ("paper-350m", "baseline" + graph, b, "MFU", "50.0%", ">= 50%", "met"),
        ("paper-350m", "hyper" + graph, b, "peak memory x baseline", "1.051", "<= 1.05", "not met"),
        ("paper-350m", "attnres" + graph, b, "peak memory x baseline", "1.010", "<= 1.05", "met"),
        ("paper-350m", "mhar" + graph, b, "throughput x baseline", "0.899", ">= 0.90", "not met"),
        ("paper-350m", "mhar" + graph, b, "peak memory x baseline", "1.050", "<= 1.05", "met"),
        ("paper-350m", "mhar" + graph, b, "step time x attnres (H = 1)", "1.030", "<= 1.03", "met"),
        ("paper-350m", "mhar-block" + graph, b, "throughput x baseline", "0.970", ">= 0.97", "met"),
        ("paper-350m", "mhar-block" + graph, b, "peak memory x baseline", "1.000", "<= 1.05", "met"),
        ("paper-100m", "baseline" + graph, b, "MFU", "39.9%", ">= 40%", "not met"),
    }
    assert bar_lines([row("baseline", preset="tiny", mfu=0.9)]) == []


def test_bench_step_interleaved(tmp_path):
    """--interleave: the baseline's steps and each method's in turn, a method's ratio the
    median of its step pairs' ratios (read back from the rows' step times); the baseline's
    row has its steps from every pair. On a GPU each model's peak memory must not count
    the other model alive beside it: it matches the sequential run's (at 350M on the H200
    28.13 GB interleaved and 28.13 sequential, session 48)."""
    argv = ["bench", "step", "--preset", "tiny", "--steps", "3", "--warmup", "1", "--compile", "off",
            "--out", str(tmp_path), *TINY]
    assert main([*argv, "--methods", "mhar,baseline,hyper", "--interleave", "--tag", "i"]) == 0
    data = json.loads((tmp_path / "step_i.json").read_text())
    assert "interleaved" in data["meta"]
    mhar, base, hyper = data["results"]
    assert [r["method"] for r in (mhar, base, hyper)] == ["mhar", "baseline", "hyper"]
    assert all(r["interleaved"] for r in (mhar, base, hyper)) and base["throughput_vs_baseline"] == 1.0
    assert len(base["step_times_ms"]) == 6 and len(mhar["step_times_ms"]) == len(hyper["step_times_ms"]) == 3
    for k, row in enumerate((mhar, hyper)):  # the pairs: the baseline's k-th run of 3 steps, then the method's
        pairs = zip(base["step_times_ms"][3 * k:3 * k + 3], row["step_times_ms"])
        assert row["throughput_vs_baseline"] == pytest.approx(sorted(b / m for b, m in pairs)[1])
        assert row["baseline_step_ms"] == pytest.approx(sorted(base["step_times_ms"][3 * k:3 * k + 3])[1])
    if torch.cuda.is_available():
        # fresh processes (--processes 2), as what a process keeps once allocated (workspaces;
        # at these shapes several times a model's own memory) depends on what ran before
        for tag, extra in (("fi", ["--interleave"]), ("fs", [])):
            assert main([*argv, "--methods", "baseline,mhar,hyper", "--tag", tag, "--processes", "2", *extra]) == 0
        fresh = {tag: {r["method"]: r for r in json.loads((tmp_path / f"step_{tag}.json").read_text())["results"]}
                 for tag in ("fi", "fs")}
        for method in ("baseline", "mhar"):
            interleaved, alone = fresh["fi"][method]["peak_mem_gb"], fresh["fs"][method]["peak_mem_gb"]
            assert interleaved == pytest.approx(alone, rel=0.1), method
        # a sequential row also counts what the methods before it left allocated (mhar's
        # leftovers in hyper's: 0.34 against 0.27 GB here on the H200, session 48), and the
        # baseline beside it would add its whole model (0.21 GB)
        assert fresh["fi"]["hyper"]["peak_mem_gb"] <= fresh["fs"]["hyper"]["peak_mem_gb"] * 1.02
    with pytest.raises(SystemExit, match="put baseline in --methods"):
        main([*argv, "--methods", "mhar", "--interleave"])


def test_bench_step_per_method_overrides(tmp_path):
    """METHOD+KEY=VALUE: overrides for one method alone, after the run's own and with a
    schedule: a setting timed both ways in one run, its rows named as given."""
    from mhar.bench_cli import build

    model = build("tiny", "mhar-block@two-phase+stream.block_size=3+stream.sum_in_product=false", 32,
                  ["stream.block_size=2"], 8, "cpu")
    s = model.config.stream
    assert (s.schedule, s.block_size, s.sum_in_product) == ("two-phase", 3, False)
    assert not build("tiny", "mhar-block", 32, ["stream.block_size=2"], 8, "cpu").config.stream.sum_in_product
    assert build("tiny", "mhar-block+stream.sum_in_product=true", 32, [], 8, "cpu").config.stream.sum_in_product
    with pytest.raises(ValueError, match="KEY=VALUE"):
        build("tiny", "mhar-block+stream.block_size", 32, [], 8, "cpu")
    # the method's stream follows the overridden shape: about 8 blocks at 16 layers, H = 3 at width 96
    assert build("tiny", "mhar-block", 32, ["n_layers=16"], 8, "cpu").config.stream.block_size == 4
    s = build("tiny", "mhar-h3@two-phase", 32, ["d_model=96", "n_layers=1"], 8, "cpu").config.stream
    assert (s.heads, s.schedule, s.chunk) == (3, "two-phase", 8)
    names = ["baseline", "mhar-block", "mhar-block+stream.sum_in_product=false"]
    assert main(["bench", "step", "--preset", "tiny", "--steps", "1", "--warmup", "1", "--compile", "off",
                 "--out", str(tmp_path), *TINY, "stream.block_size=3", "--methods", ",".join(names),
                 "--tag", "o"]) == 0
    rows = json.loads((tmp_path / "step_o.json").read_text())["results"]
    assert [r["method"] for r in rows] == names and all(r["tokens_per_s"] > 0 for r in rows)


def test_bench_step_records_flash_attn_4_for_fa4_rows(tmp_path):
    """A run with attention_kernel=fa4 names the flash-attn-4 it ran (here none: SDPA ran)."""
    from mhar.bench_cli import build

    assert build("tiny", "baseline+attention_kernel=fa4", 32, [], 8, "cpu").config.attention_kernel == "fa4"
    assert main(["bench", "step", "--preset", "tiny", "--steps", "1", "--warmup", "1", "--compile", "off",
                 "--out", str(tmp_path), *TINY, "--methods", "baseline,baseline+attention_kernel=fa4",
                 "--tag", "f"]) == 0
    meta = json.loads((tmp_path / "step_f.json").read_text())["meta"]
    assert meta["flash-attn-4"] == "not installed (SDPA ran)"


def bench_module(name: str):
    """A script of bench/ imported as a module."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def test_step_floor_baseline_parts(tmp_path):
    """bench/step_floor.py's baseline floor: each part from the shapes (products at the
    peak, bytes at the copy rate), the compiled regions from a region_bytes.py file."""
    baseline_floor = bench_module("step_floor").baseline_floor
    (tmp_path / "regions_1b.json").write_text(json.dumps({"total_gb": 100.0}))
    p = baseline_floor("paper-1b", 4000.0, str(tmp_path))
    # 1B: 1,079,313,280 parameters, 32 bytes each; 16 x 1024 tokens; 151,936-entry vocabulary
    assert p["optimizer"] == pytest.approx(32 * 1_079_313_280 / 4000e9 * 1e3)
    assert p["loss kernel"] == pytest.approx(3 * 16384 * 151936 * 2 / 4000e9 * 1e3)
    assert p["regions"] == pytest.approx(25.0)
    assert p["attention"] == pytest.approx(6 * 36 * 1024 * 1280 * 16384 / 989e12 * 1e3)
    assert p["total"] == pytest.approx(sum(p[k] for k in ("matmul", "attention", "optimizer", "loss kernel", "regions")))
    assert baseline_floor("paper-350m", 4000.0, str(tmp_path))["regions"] is None  # no file for it
    # several folders: the first holding the preset's file wins
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "regions_1b.json").write_text(json.dumps({"total_gb": 40.0}))
    (tmp_path / "b" / "regions_350m.json").write_text(json.dumps({"total_gb": 20.0}))
    assert baseline_floor("paper-1b", 4000.0, f"{tmp_path / 'b'},{tmp_path}")["regions"] == pytest.approx(10.0)
    assert baseline_floor("paper-1b", 4000.0, f"{tmp_path},{tmp_path / 'b'}")["regions"] == pytest.approx(25.0)
    assert baseline_floor("paper-350m", 4000.0, f"{tmp_path},{tmp_path / 'b'}")["regions"] == pytest.approx(5.0)


def test_step_floor_profile_kinds(tmp_path):
    """bench/step_floor.py sums a baseline profile's kernels by kind (profile_step.py's
    .tsv), skipping the routing-launch list and eager profiles (not the graphed step)."""
    profile_kinds = bench_module("step_floor").profile_kinds
    rows = "kind\tlaunches_per_step\tms_per_step\tname\nmatmul\t4\t3.5\tnvjet_a\nmatmul\t8\t1.5\tnvjet_b\n" \
           "compiled\t60\t0.25\ttriton_poi_fused__to_copy_t_1\n"
    (tmp_path / "profile_paper-1b_baseline_regions_routing_launches.tsv").write_text("kind\n")
    (tmp_path / "profile_paper-1b_baseline_regions_eager.tsv").write_text(rows.replace("3.5", "9.0"))
    (tmp_path / "profile_paper-1b_baseline_regions.tsv").write_text(rows)
    kinds, f = profile_kinds(f"{tmp_path / 'none'},{tmp_path}", "paper-1b")
    assert kinds == pytest.approx({"matmul": 5.0, "compiled": 0.25})
    assert f.endswith("profile_paper-1b_baseline_regions.tsv")
    assert profile_kinds(str(tmp_path), "paper-350m") == ({}, "")
    (tmp_path / "profile_paper-1b_baseline_regions.tsv").unlink()
    assert profile_kinds(str(tmp_path), "paper-1b") == ({}, "")  # only an eager profile


@pytest.mark.parametrize("preset", ["paper-100m", "paper-1b"])
def test_gemm_rate_replays_the_steps_products(preset):
    """bench/gemm_rate.py's products of one step: three per linear and per LM-head chunk,
    their FLOPs the model's own count of matrix-product FLOPs (attention left out)."""
    from mhar.bench_cli import PAPER_MICROBATCH
    from mhar.model import get_preset
    from mhar.model.decoder import Decoder

    products = bench_module("gemm_rate").step_products(preset, 4096)
    batch, seq = PAPER_MICROBATCH[preset]
    cfg = get_preset(preset, "baseline")
    with torch.device("meta"):
        per_token = Decoder(cfg).flops_per_token(seq) - 6 * cfg.n_layers * seq * cfg.n_heads * cfg.attn_head_dim
    assert sum(2 * n * m * k * nn for _, n, m, nn, k in products) == pytest.approx(per_token * batch * seq, rel=1e-12)
    head = [p for p in products if p[0].startswith("LM head")]
    assert [p[1] for p in head] == [batch * seq // 4096] * 3


def test_bench_run_meta(monkeypatch, capsys):
    """bench/attention_bench.run_meta: the record every bench script's result file starts
    with (command, device, versions, commit from MHAR_COMMIT, date), the script's own keys
    among them, printed as one JSON line."""
    monkeypatch.setenv("MHAR_COMMIT", "abc1234")
    meta = bench_module("attention_bench").run_meta(preset="paper-1b", env={"X": "1"})
    assert meta["commit"] == "abc1234" and meta["preset"] == "paper-1b" and meta["env"] == {"X": "1"}
    assert meta["torch"] == torch.__version__ and meta["command"].startswith("python3 ")
    assert meta["device"] == (torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    assert list(meta)[-1] == "date_utc" and len(meta["date_utc"]) == 19
    assert json.loads(capsys.readouterr().out.strip()) == meta


def test_gemm_rate_operands():
    """bench/gemm_rate.py's operands: every copy its own a and b (b a transposed weight, as
    F.linear sees it), one output per product, and their FLOPs."""
    ops, flops = bench_module("gemm_rate").product_operands([("x", 2, 8, 16, 32), ("y", 1, 4, 6, 4)], device="cpu")
    assert [(tuple(a.shape), tuple(b.shape), tuple(c.shape)) for a, b, c in ops] == \
        [((8, 32), (32, 16), (8, 16))] * 2 + [((4, 4), (4, 6), (4, 6))]
    assert ops[0][0] is not ops[1][0] and ops[0][1] is not ops[1][1] and ops[0][2] is ops[1][2]
    assert all(not b.is_contiguous() and b.t().is_contiguous() for _, b, _ in ops)
    assert flops == 2 * 2 * 8 * 16 * 32 + 2 * 4 * 6 * 4


def test_step_floor_newest_baseline(tmp_path):
    """bench/step_floor.py takes each preset's newest baseline row (by the file's recorded
    date, one microbatch per update) from any step_*.json below the folder."""
    newest_baseline = bench_module("step_floor").newest_baseline

    def write(path, date, rows):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"meta": {"date": date}, "results": rows}))

    base = {"method": "baseline", "preset": "paper-1b", "accum": 1}
    write(tmp_path / "step_paper-1b.json", "2026-11-30 01:00:00 UTC", [{**base, "step_ms": 313.6}])
    write(tmp_path / "s17" / "step_1b_30.json", "2026-11-30 23:59:00 UTC",
          [{**base, "step_ms": 246.3}, {**base, "method": "mhar", "step_ms": 304.4}])
    write(tmp_path / "s17" / "step_1b_acc.json", "2026-12-01 00:10:00 UTC", [{**base, "accum": 2, "step_ms": 480.0}])
    (tmp_path / "step_broken.json").write_text("{")
    ms, src = newest_baseline(str(tmp_path), "paper-1b")
    assert ms == 246.3 and src.endswith("step_1b_30.json")
    assert newest_baseline(str(tmp_path), "paper-350m") == (None, "")


@pytest.mark.parametrize("n_products,n_adds", [(5, 12), (7, 3), (4, 0), (1, 5)])
def test_overlap_probe_spreads_the_adds(n_products, n_adds):
    """bench/overlap_probe.py's serial graph: every product and add once, in order, the adds
    spread evenly between the products (the last product followed by the last adds)."""
    interleaved = bench_module("overlap_probe").interleaved
    calls = []
    products = [lambda i=i: calls.append(("p", i)) for i in range(n_products)]
    adds = [lambda i=i: calls.append(("a", i)) for i in range(n_adds)]
    interleaved(products, adds)
    assert [c for c in calls if c[0] == "p"] == [("p", i) for i in range(n_products)]
    assert [c for c in calls if c[0] == "a"] == [("a", i) for i in range(n_adds)]
    assert calls[0] == ("p", 0)
    after, product = [0] * n_products, 0  # the adds that run after each product, before the next
    for kind, i in calls:
        if kind == "p":
            product = i
        else:
            after[product] += 1
    assert all(abs(n - n_adds / n_products) < 1 for n in after), after


def test_pick_config(tmp_path, monkeypatch):
    """bench/pick_config.py: the variant with the least time against the first config's,
    averaged over the source counts (routing kernels, or COEF pass and gather), written as
    a config file only when it is at most the limit."""
    pick = bench_module("pick_config")
    configs = {"built": {}, "a": {"coef_grads_lanes": 16}, "b, few sources": {"fwd_split_maxnreg": 128}}
    table = ["| sources | config | forward | COEF pass | gather | routing kernels |", "|---|---|---|---|---|---|"]
    for n, times in ((9, {"built": (1, 2, 0, 4), "a": (1, 1, 0, 3.6), "b, few sources": (0.5, 2, 0, 3.4)}),
                     (17, {"built": (2, 4, 0, 8), "a": (2, 2, 0, 7.2), "b, few sources": (1, 4, 0, 7.2)})):
        table += [f"| {n} | {m} | " + " | ".join(map(str, t)) + " |" for m, t in times.items()]
    assert pick.pick(table, configs) == ("b, few sources", pytest.approx((3.4 / 4 + 7.2 / 8) / 2))
    assert pick.pick(table, configs, "backward") == ("a", pytest.approx(0.5))
    md, sweep, out = tmp_path / "s.md", tmp_path / "s.json", tmp_path / "pick.json"
    md.write_text("\n".join(table) + "\n")
    sweep.write_text(json.dumps(configs))
    for limit, rc in (("0.8", 1), ("0.9", 0)):
        monkeypatch.setattr("sys.argv", ["pick_config.py", str(md), str(sweep), "512,1", limit, str(out)])
        assert pick.main() == rc
    assert json.loads(out.read_text()) == {"512,1": {"fwd_split_maxnreg": 128}}


def test_bench_step_mfu_against_the_devices_peak(tmp_path, monkeypatch):
    """A row's MFU is its FLOPs a second over the device's peak: --peak-tflops, else
    MHAR_PEAK_TFLOPS, else the GPU's from mhar.gpu_peak's table; on the CPU none ("-")."""
    monkeypatch.delenv("MHAR_PEAK_TFLOPS", raising=False)
    argv = ["bench", "step", "--preset", "tiny", "--methods", "baseline", "--steps", "1", "--warmup", "1",
            "--compile", "off", "--out", str(tmp_path), *TINY]

    def run(tag, *extra):
        assert main([*argv, "--tag", tag, *extra]) == 0
        data = json.loads((tmp_path / f"step_{tag}.json").read_text())
        return data["meta"], data["results"][0], (tmp_path / f"step_{tag}.md").read_text()

    meta, r, md = run("given", "--peak-tflops", "0.5")
    assert (meta["peak_tflops"], meta["peak_from"]) == (0.5, "given")
    assert r["mfu"] == pytest.approx(r["flops_per_token"] * r["tokens_per_s"] / 0.5e12)
    assert f"| {100 * r['mfu']:.1f}% |" in md
    monkeypatch.setenv("MHAR_PEAK_TFLOPS", "2")
    meta, r, _ = run("env")
    assert (meta["peak_tflops"], meta["peak_from"]) == (2.0, "MHAR_PEAK_TFLOPS")
    assert r["mfu"] == pytest.approx(r["flops_per_token"] * r["tokens_per_s"] / 2e12)
    monkeypatch.delenv("MHAR_PEAK_TFLOPS")
    meta, r, md = run("own")
    if torch.cuda.is_available():
        from mhar.gpu_peak import peak_tflops

        assert meta["peak_tflops"] == peak_tflops(torch.cuda.get_device_name())
    else:
        assert meta["peak_tflops"] is None and r["mfu"] != r["mfu"]  # NaN
        row = next(line for line in md.splitlines() if line.startswith("| tiny | baseline |"))
        assert row.split(" | ")[5] == "-"
