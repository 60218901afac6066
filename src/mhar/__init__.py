"""mhar: depth routing for Transformers.

Multi-head attention residuals (MHAR), attention residuals (H = 1), their block and
delta forms, and the baselines they are judged against (standard residual, static
hyper-connections), with a reference depth read and fused kernels behind one op.
"""

from mhar.model import (
    Decoder,
    KVCache,
    ModelConfig,
    StreamConfig,
    apply_overrides,
    count_parameters,
    get_preset,
    method_stream,
)
from mhar.routing import finalize, merge_partials, route, route_partial
from mhar.streams import DeltaStream, HyperStream, ResidualStream, RoutedStream, StandardStream, build_stream

__version__ = "0.1.0"

__all__ = [
    "Decoder", "KVCache", "ModelConfig", "StreamConfig", "apply_overrides", "count_parameters", "get_preset",
    "method_stream", "route", "route_partial", "merge_partials", "finalize", "ResidualStream", "StandardStream",
    "RoutedStream", "DeltaStream", "HyperStream", "build_stream",
]
