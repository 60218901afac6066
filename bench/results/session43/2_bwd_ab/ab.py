"""Session 43 call 2: routing config variants side by side in ONE `mhar bench step` process.
A method "mhar+NAME" runs MHAR with VARIANTS[NAME] laid over the routing config of the
1024-wide, several-head entry (`op.CONFIG_TABLE[(1024, True)]`) while it is built,
captured and timed; a plain "mhar" runs the config as built. So as-built and variant
rows share one process's baseline, clocks and compiled regions.
Run as `python3 ab.py VARIANTS.json <mhar bench step arguments>`."""
import json
import sys

import mhar.bench_cli as bench
from mhar.routing import op

KEY = (1024, True)
AS_BUILT = dict(op.CONFIG_TABLE[KEY])
VARIANTS = json.load(open(sys.argv[1]))


def build(preset, method, *args, **kwargs):
    name, _, variant = method.partition("+")
    op.CONFIG_TABLE[KEY] = {**AS_BUILT, **(VARIANTS[variant] if variant else {})}
    return _build(preset, name, *args, **kwargs)


_build, bench.build = bench.build, build
sys.argv = ["mhar", "bench", "step", *sys.argv[2:]]
from mhar.cli import main  # noqa: E402

sys.exit(main())
