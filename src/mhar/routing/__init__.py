"""The depth read: reference (definition) and fused kernels behind one op."""

from mhar.routing.reference import (
    KEY_NORM_EPS,
    Partial,
    finalize,
    merge_partials,
    route,
    route_partial,
    routing_weights,
)

__all__ = ["KEY_NORM_EPS", "Partial", "finalize", "merge_partials", "route", "route_partial", "routing_weights"]
