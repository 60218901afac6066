"""Standard residual: h <- h + f(RMSNorm(h))."""

from __future__ import annotations

from torch import Tensor

from mhar.streams.base import ResidualStream, StreamState


class _StandardState(StreamState):
    def __init__(self, embedding: Tensor):
        self.h = embedding

    def read(self, i: int) -> Tensor:
        return self.h

    def write(self, i: int, output: Tensor) -> None:
        self.h = self.h + output

    def final(self) -> Tensor:
        return self.h


class StandardStream(ResidualStream):
    method = "standard"

    def start(self, embedding: Tensor) -> StreamState:
        return _StandardState(embedding)
