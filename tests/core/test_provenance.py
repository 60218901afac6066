"""mhar.provenance.source_commit: the commit of mhar's own checkout, whatever the working
directory; "unknown" for a copy inside another repository or outside any; MHAR_COMMIT
wins."""

import shutil
import subprocess

import pytest

from mhar import provenance

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def repo_with(tmp_path, package_path):
    """A git repository at tmp_path with one commit holding package_path/__init__.py."""
    package = tmp_path / package_path
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    return package


def test_environment_wins(monkeypatch):
    monkeypatch.setenv("MHAR_COMMIT", "abc1234")
    assert provenance.source_commit() == "abc1234"


@needs_git
def test_own_checkout_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("MHAR_COMMIT", raising=False)
    package = repo_with(tmp_path / "repo", "src/mhar")
    monkeypatch.setattr(provenance, "PACKAGE_DIR", package.resolve())
    monkeypatch.chdir(tmp_path)  # not inside the repository
    head = git(tmp_path / "repo", "rev-parse", "HEAD")
    assert provenance.source_commit(short=False) == head
    assert head.startswith(provenance.source_commit())
    (package / "__init__.py").write_text("x = 1\n")  # a tracked file changed
    assert provenance.source_commit(short=False) == head + "+dirty"


@needs_git
def test_copy_inside_another_repository(tmp_path, monkeypatch):
    # e.g. installed into a virtual environment inside a user's own project
    monkeypatch.delenv("MHAR_COMMIT", raising=False)
    package = repo_with(tmp_path, ".venv/lib/site-packages/mhar")
    monkeypatch.setattr(provenance, "PACKAGE_DIR", package.resolve())
    assert provenance.source_commit() == "unknown"


def test_outside_any_repository(tmp_path, monkeypatch):
    monkeypatch.delenv("MHAR_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git stops looking above tmp_path
    package = tmp_path / "mhar"
    package.mkdir()
    monkeypatch.setattr(provenance, "PACKAGE_DIR", package)
    assert provenance.source_commit() == "unknown"
