"""Which code produced a result: the commit that benchmark, evaluation and training
records carry.

The commit is this package's own checkout's, whatever the working directory: a bench run
from another folder still names the code it timed, and an installed copy inside some other
git repository (a user's project with its virtual environment) does not take that
repository's commit. ``MHAR_COMMIT`` overrides it, for copies of the tree without
``.git`` (the GPU machine's).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def source_commit(short: bool = True) -> str:
    """The checkout's commit (``+dirty`` when tracked files differ from it), or "unknown"."""
    if os.environ.get("MHAR_COMMIT"):
        return os.environ["MHAR_COMMIT"]
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() / "src" / "mhar" != PACKAGE_DIR:  # not our checkout
        return "unknown"
    commit = _git("rev-parse", *(["--short"] if short else []), "HEAD")
    if commit is None:
        return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return commit + ("+dirty" if dirty else "")
