"""The decoder, its configuration and its building blocks."""

from mhar.model.config import (
    METHODS,
    PRESETS,
    ModelConfig,
    StreamConfig,
    apply_overrides,
    get_preset,
    method_stream,
)
from mhar.model.decoder import Decoder, count_parameters
from mhar.model.layers import KVCache

__all__ = ["METHODS", "PRESETS", "ModelConfig", "StreamConfig", "apply_overrides", "get_preset", "method_stream",
           "Decoder", "count_parameters", "KVCache"]
