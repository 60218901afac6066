"""Session 43 call 4: methods for `bench/profile_step.py` beyond the registered ones, in
one process: `mhar-unfused` (MHAR with the stream's fuse_norm off: the sublayers apply
their own pre-norms, as before this session) and `mhar+NAME` (MHAR with VARIANTS[NAME]
laid over the routing config of the 1024-wide, several-head entry while it is built and
profiled). Run as `python3 variants.py <profile_step.py arguments>`."""
import sys
from pathlib import Path

import mhar.bench_cli as bench
from mhar.routing import op

KEY = (1024, True)
AS_BUILT = dict(op.CONFIG_TABLE[KEY])
VARIANTS = {"w1": {"out_norm_bwd_warps": 1}}


def build(preset, method, *args, **kwargs):
    name, _, variant = method.partition("+")
    op.CONFIG_TABLE[KEY] = {**AS_BUILT, **(VARIANTS[variant] if variant else {})}
    unfused = name.startswith("mhar-unfused")
    model = _build(preset, "mhar" + name[len("mhar-unfused"):] if unfused else name, *args, **kwargs)
    if unfused:
        model.residual.fuse_norm = False
    return model


_build, bench.build = bench.build, build  # before profile_step imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import profile_step  # noqa: E402  (bench/profile_step.py)

profile_step.main()
