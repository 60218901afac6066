"""Choosing between a plain-PyTorch reference and Triton kernels, for one fused op family.

The routing op, the fused loss and the hyper-connection glue each own a
:class:`BackendChoice`: "auto" (Triton on CUDA tensors when triton imports, the
reference elsewhere; the default unless the owner sets another), "reference", or "triton"
(everywhere; CPU tensors only under ``TRITON_INTERPRET=1``, for tests). A choice set in
code wins over the environment variable.
"""

from __future__ import annotations

import importlib
import os

import torch

BACKENDS = ("auto", "reference", "triton")
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def fix_interpreter_index() -> None:
    """Under ``TRITON_INTERPRET=1``, let a tensor serve as an index with any NumPy.

    The interpreter holds scalars (``tl.program_id``, runtime arguments) as one-element 1-D
    arrays. Triton 3.6's turns one into a loop bound with ``int()`` of that array, which
    NumPy >= 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars"),
    so every kernel looping from a program id or to a runtime count fails there; Triton 3.9
    squeezes the array first. This makes an older interpreter do the same, through the hook
    it patches ``tl.tensor`` with (and restores after each launch). Each kernel module calls
    it once after importing triton; it does nothing outside the interpreter."""
    if not interpreting():
        return
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - triton missing
        return
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "mhar_squeezes_index", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.mhar_squeezes_index = True
    interpreter._patch_lang_tensor = patch_lang_tensor


class BackendChoice:
    def __init__(self, what: str, env_var: str, kernel_module: str, default: str = "auto"):
        self.what, self.env_var, self.kernel_module, self.default = what, env_var, kernel_module, default
        self.chosen: str | None = None
        self._importable: bool | None = None

    def set(self, name: str | None) -> None:
        if name is not None and name not in BACKENDS:
            raise ValueError(f"{self.what} backend must be one of {BACKENDS}; got {name!r}")
        self.chosen = name

    def get(self) -> str:
        name = self.chosen or os.environ.get(self.env_var, self.default)
        if name not in BACKENDS:
            raise ValueError(f"{self.env_var} must be one of {BACKENDS}; got {name!r}")
        return name

    def triton_available(self) -> bool:
        if self._importable is None:
            try:
                importlib.import_module(self.kernel_module)  # imports triton
                self._importable = True
            except Exception:  # pragma: no cover - triton missing
                self._importable = False
        return self._importable

    def use_triton(self, is_cuda: bool, dtype: torch.dtype) -> bool:
        b = self.get()
        if b == "reference" or dtype not in KERNEL_DTYPES:
            return False
        if b == "triton":
            if not self.triton_available():
                raise RuntimeError(f"{self.what} backend 'triton' was forced but triton cannot be imported")
            if not is_cuda and not interpreting():
                raise RuntimeError(f"{self.what} backend 'triton' on CPU tensors needs TRITON_INTERPRET=1")
            return True
        return is_cuda and self.triton_available()
