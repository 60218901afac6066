"""Session 43 call 3: `mhar bench step` with one more method, `mhar-unfused`: MHAR with
its reads returning the plain read and the sublayers applying their own pre-norms
(the stream's fuse_norm off, the behaviour before this session), so that the fused
pre-norm (`mhar`, fuse_norm on by default) is timed against it in one process.
Run as `python3 unfused.py <mhar bench step arguments>`."""
import sys

import mhar.bench_cli as bench


def build(preset, method, *args, **kwargs):
    if not method.startswith("mhar-unfused"):
        return _build(preset, method, *args, **kwargs)
    model = _build(preset, "mhar" + method[len("mhar-unfused"):], *args, **kwargs)
    model.residual.fuse_norm = False
    return model


_build, bench.build = bench.build, build
sys.argv = ["mhar", "bench", "step", *sys.argv[1:]]
from mhar.cli import main  # noqa: E402

sys.exit(main())
