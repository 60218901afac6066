"""The model code that travels with a saved Hugging Face folder, so that
``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`` works where
mhar is not installed.

``transformers`` loads remote code from flat files in the model folder and follows
only relative imports (``from .name import x``). So the mhar modules the model needs
(config, layers, decoder, the stream strategies, the reference depth read and
:mod:`mhar.model.hf` itself) are written beside the weights as flat files, their
``from mhar.a.b import x`` lines rewritten to ``from .mhar_a_b import x``:

    modeling_mhar.py            mhar/model/hf.py   (MharConfig, MharForCausalLM)
    mhar_model_config.py        mhar/model/config.py
    mhar_model_decoder.py, mhar_model_layers.py, mhar_streams*.py, ...
    mhar_routing.py             the routing namespace: the plain-PyTorch reference read
    mhar_routing_reference.py   mhar/routing/reference.py

The code is copied from the installed mhar at save time (one source of truth, no
hand-kept duplicate); the remote read is always the reference (no Triton needed).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

ROOT_MODULE = "mhar.model.hf"
MODELING_FILE = "modeling_mhar"
AUTO_MAP = {"AutoConfig": f"{MODELING_FILE}.MharConfig", "AutoModelForCausalLM": f"{MODELING_FILE}.MharForCausalLM"}

# The routing package is replaced by this shim: the reference read under the package's names.
_ROUTING_SHIM = '''"""mhar.routing for remote code: the plain-PyTorch reference depth read."""

from . import mhar_routing_reference as reference
from .mhar_routing_reference import *  # noqa: F401,F403
from .mhar_routing_reference import KEY_NORM_EPS, finalize, merge_partials


class GradientSink:
    """No fused backward here: sources stay as they are and autograd sums their gradients
    (the entries are counted only as the streams' bookkeeping expects)."""

    def __init__(self):
        self.entries = 0

    def register(self, source, index=None):
        self.entries += index is None
        return source

    def reserve(self):
        self.entries += 1
        return self.entries - 1

    def running_sum(self, total, output, index, added=False):
        return output if total is None or added else total + output

    def span(self, start, count):
        return None


def route(sources, query, norm_weight, heads=1, eps=KEY_NORM_EPS, sink=None):
    return reference.route(sources, query, norm_weight, heads, eps)


def route_partial(sources, queries, norm_weights, heads=1, eps=KEY_NORM_EPS, sink=None, scales=None):
    return reference.route_partial(sources, queries, norm_weights, heads, eps)


class KeyScales:
    """The fused kernels' cache of the sources' key-norm scales; the reference read has none."""


class PhaseOneRows:
    """A chunk's phase-1 read, row i as a one-row Partial (the two-phase schedule)."""

    direct = False

    def __init__(self, partial):
        self.partial = partial

    def __getitem__(self, i):
        return self.view(i)

    def view(self, i):
        p = self.partial
        return type(p)(p.m[i:i + 1], p.l[i:i + 1], p.o[i:i + 1])


def route_partial_rows(sources, queries, norm_weights, heads=1, eps=KEY_NORM_EPS, sink=None, scales=None):
    return PhaseOneRows(reference.route_partial(sources, queries, norm_weights, heads, eps))


def route_merge(partial, sources, query, norm_weight, heads=1, eps=KEY_NORM_EPS, sink=None, scales=None):
    new = reference.route_partial(sources, query.view(1, -1), norm_weight.view(1, -1), heads, eps)
    return finalize(merge_partials(partial, new), sources[0].shape, sources[0].dtype)[0]
'''


def _flat(module: str) -> str:
    return MODELING_FILE if module == ROOT_MODULE else module.replace(".", "_")


def _is_package(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.submodule_search_locations is not None


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"cannot find the source of {module}")
    return Path(spec.origin).read_text(encoding="utf-8")


def _rewrite(module: str, text: str) -> tuple[str, list[str]]:
    """Rewrite the module-level ``from mhar...`` imports of ``text`` to relative flat
    imports; return the new text and the mhar modules it needs."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    needed: list[str] = []
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "mhar" or a.name.startswith("mhar.") for a in node.names):
            raise RuntimeError(f"{module}: 'import mhar...' cannot be bundled; use 'from mhar... import ...'")
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module != "mhar" and not node.module.startswith("mhar."):
            continue
        indent = lines[node.lineno - 1][: node.col_offset]
        new = []
        target = node.module
        plain, submodules = [], []
        for alias in node.names:
            full = f"{target}.{alias.name}"
            if importlib.util.find_spec(target) and _is_package(target) and importlib.util.find_spec(full) is not None:
                submodules.append(alias)
            else:
                plain.append(alias)
        if plain:
            if target.startswith("mhar.routing"):
                target_mod = "mhar.routing" if _is_package(target) else target
            else:
                target_mod = target
            needed.append(target_mod)
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in plain)
            new.append(f"{indent}from .{_flat(target_mod)} import {names}\n")
        for alias in submodules:
            full = f"{target}.{alias.name}"
            needed.append(full)
            # the first line lets transformers find (and copy) the file; the second binds the module
            new.append(f"{indent}from .{_flat(full)} import __name__ as _{_flat(full)}_name  # noqa: F401\n")
            new.append(f"{indent}from . import {_flat(full)} as {alias.asname or alias.name}\n")
        edits.append((node.lineno - 1, node.end_lineno, "".join(new)))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new]
    return "".join(lines), needed


def bundle_sources(root: str = ROOT_MODULE) -> dict[str, str]:
    """File name -> source for the flat remote-code bundle of ``root``."""
    files: dict[str, str] = {}
    todo, seen = [root], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module == "mhar.routing":
            files["mhar_routing.py"] = _ROUTING_SHIM
            todo.append("mhar.routing.reference")
            continue
        text, needed = _rewrite(module, _source(module))
        if module == ROOT_MODULE:
            text = text.replace(f'if __name__ == "{ROOT_MODULE}":', "if False:  # remote code: no registration")
        files[f"{_flat(module)}.py"] = text
        todo.extend(needed)
    return files


def write_remote_code(folder: str | Path) -> list[str]:
    """Write the remote-code files into a saved model folder; returns their names."""
    folder = Path(folder)
    names = []
    for name, text in sorted(bundle_sources().items()):
        (folder / name).write_text(text, encoding="utf-8")
        names.append(name)
    return names


__all__ = ["AUTO_MAP", "bundle_sources", "write_remote_code"]
