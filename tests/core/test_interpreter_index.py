"""mhar.backends.fix_interpreter_index: under TRITON_INTERPRET=1 a tensor used as an index
(a program id, a runtime loop bound) converts with any NumPy. Triton 3.6's interpreter
converted a one-element 1-D array with int(), which NumPy >= 2.4 refuses; the hook it
patches tl.tensor with now squeezes first. Checked on a stand-in for Triton 3.6's hook, so
it fails on any Triton if the fix is gone or wrong, and on a kernel that loops from its
program id with the installed interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("numpy")  # both for the subprocess below

SRC = str(Path(__file__).resolve().parents[2] / "src")

CHECK = r"""
import numpy as np, torch, triton, triton.language as tl
from triton.runtime import interpreter
from mhar.backends import fix_interpreter_index

real_hook = interpreter._patch_lang_tensor

def hook_of_triton_3_6(tensor, scope):  # its __index__: int() of the array as held
    def index(self):
        if self.handle.data.ndim:  # what NumPy >= 2.4 does
            raise TypeError("only 0-dimensional arrays can be converted to Python scalars")
        return int(self.handle.data)
    scope.set_attr(tensor, "__index__", index)

class Scope:  # what the interpreter passes: set_attr records what it changes
    def __init__(self): self.changes = []
    def set_attr(self, obj, name, value): self.changes.append(name); setattr(obj, name, value)

class Handle:
    data = np.array([7], dtype=np.int32)  # a scalar as the interpreter holds it

class Tensor:
    handle = Handle()

interpreter._patch_lang_tensor = hook_of_triton_3_6
fix_interpreter_index()
fix_interpreter_index()  # a second call must not wrap twice
scope = Scope()
interpreter._patch_lang_tensor(Tensor, scope)
assert scope.changes == ["__index__", "__index__"], scope.changes
assert Tensor().__index__() == 7

# the installed interpreter, fixed, runs a kernel looping from its program id
interpreter._patch_lang_tensor = real_hook
fix_interpreter_index()

@triton.jit
def strided_rows(X, n_rows):  # each program takes every num_programs-th row
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        tl.store(X + row, tl.load(X + row) + 1.0)

x = torch.zeros(9)
strided_rows[(4,)](x, 9)
assert torch.equal(x, torch.ones(9)), x
print("ok")
"""


def test_fix_interpreter_index():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout[-3000:] + r.stderr[-3000:]


def test_fix_interpreter_index_does_nothing_outside_the_interpreter(monkeypatch):
    from triton.runtime import interpreter

    from mhar.backends import fix_interpreter_index

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    before = interpreter._patch_lang_tensor
    fix_interpreter_index()
    assert interpreter._patch_lang_tensor is before
