"""The depth read: reference (definition) and fused kernels behind one op.

``route`` and ``route_partial`` dispatch through the ``mhar::route`` /
``mhar::route_partial`` custom ops (fused Triton kernels on CUDA, the reference
elsewhere; force one with :func:`set_backend` or ``MHAR_ROUTING_BACKEND``).
The reference's own functions stay importable from :mod:`mhar.routing.reference`.
"""

from mhar.routing.op import (
    GradientSink,
    KeyScales,
    PhaseOneRow,
    PhaseOneRows,
    finalize,
    get_backend,
    route,
    route_merge,
    route_partial,
    route_partial_rows,
    set_backend,
)
from mhar.routing.reference import (
    KEY_NORM_EPS,
    Partial,
    merge_partials,
    routing_weights,
)

__all__ = ["GradientSink", "KEY_NORM_EPS", "KeyScales", "Partial", "PhaseOneRow", "PhaseOneRows", "finalize", "get_backend",
           "merge_partials", "route", "route_merge", "route_partial", "route_partial_rows", "routing_weights",
           "set_backend"]
