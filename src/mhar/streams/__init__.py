"""Residual-stream strategies: one small class per method behind one interface."""

from mhar.streams.base import ResidualStream, StreamState
from mhar.streams.delta import DeltaStream
from mhar.streams.hyper import HyperStream
from mhar.streams.routed import RoutedStream
from mhar.streams.standard import StandardStream


def build_stream(cfg, d_model: int, num_sublayers: int) -> ResidualStream:
    """The stream strategy for a :class:`mhar.model.config.StreamConfig`."""
    cfg.validate(d_model, num_sublayers)
    if cfg.method == "standard":
        return StandardStream(d_model, num_sublayers)
    if cfg.method == "hyper":
        return HyperStream(d_model, num_sublayers, cfg.hyper_n, cfg.hyper_recompute)
    if cfg.method == "routed":
        return RoutedStream(d_model, num_sublayers, cfg.heads, cfg.block_size, cfg.schedule, cfg.chunk,
                            cfg.phase1_min_sources, cfg.sum_in_product)
    if cfg.method == "delta":
        return DeltaStream(d_model, num_sublayers, cfg.heads, cfg.block_size, cfg.schedule)
    raise ValueError(f"unknown stream method {cfg.method!r}")


__all__ = ["ResidualStream", "StreamState", "StandardStream", "RoutedStream", "DeltaStream", "HyperStream",
           "build_stream"]
