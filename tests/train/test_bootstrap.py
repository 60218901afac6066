"""scripts/bootstrap.py: the README's two commands (the set-up itself is exercised by CI)."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def boot(monkeypatch):
    spec = importlib.util.spec_from_file_location("bootstrap", ROOT / "scripts" / "bootstrap.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls = []
    monkeypatch.setattr(mod, "setup", lambda: Path("/venv/bin/python"))

    def fake_run(cmd, **kw):
        calls.append((cmd, kw))
        return subprocess.CompletedProcess(cmd, mod.fake_code)
    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    mod.fake_code, mod.calls = 0, calls
    return mod


def test_test_command_runs_pytest_over_tests(boot):
    assert boot.main(["test", "-q"]) == 0
    cmd, kw = boot.calls[0]
    assert cmd[1:] == ["-m", "pytest", "tests", "-q"] and kw["cwd"] == ROOT
    assert kw["env"]["OMP_WAIT_POLICY"]


def test_no_tests_collected_is_a_failure(boot):
    boot.fake_code = 5
    assert boot.main(["test"]) == 1


def test_failures_propagate(boot):
    boot.fake_code = 1
    assert boot.main(["test"]) == 1


def test_demo_runs_compare(boot):
    assert boot.main(["demo", "steps=10"]) == 0
    assert boot.calls[0][0][1:] == ["-m", "mhar", "compare", "steps=10"]


def test_unknown_command(boot, capsys):
    assert boot.main(["nope"]) == 2


def test_ci_calls_the_test_command():
    text = (ROOT / ".ci" / "run").read_text()
    assert "scripts/bootstrap.py test" in text and (ROOT / ".ci" / "run").stat().st_mode & 0o111
