"""Session 43 call 1: an upper bound, not a method. `mhar bench step` with one more method,
`mhar-nonorm`: MHAR whose sublayers skip their pre-norm (nn.Identity), so that its step
has no norm kernels between the routing reads and the sublayers' products. The time it
saves against `mhar` in the same process bounds what fusing that norm into the routing
kernels could give back. Run as `python3 bound.py <mhar bench step arguments>`."""
import sys

from torch import nn

import mhar.bench_cli as bench


def build(preset, method, *args, **kwargs):
    if not method.startswith("mhar-nonorm"):
        return _build(preset, method, *args, **kwargs)
    model = _build(preset, "mhar" + method[len("mhar-nonorm"):], *args, **kwargs)
    for sublayer in model.sublayers:
        sublayer.norm = nn.Identity()
    return model


_build, bench.build = bench.build, build
sys.argv = ["mhar", "bench", "step", *sys.argv[1:]]
from mhar.cli import main  # noqa: E402

sys.exit(main())
