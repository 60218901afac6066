"""Standard residual: h <- h + f(RMSNorm(h))."""

from __future__ import annotations

from torch import Tensor

from mhar.streams.base import ResidualStream, StreamState, check_written


class _StandardState(StreamState):
    """The stream h, and the last sublayer output not yet added to it. The add is left
    to the next sublayer's call (``step``), which fuses it with that sublayer's norm
    (``residual=`` of the decoder's sublayers), or done on the next ``read``/``final``."""

    def __init__(self, embedding: Tensor):
        self.h = embedding
        self.pending: Tensor | None = None

    def _settle(self) -> Tensor:
        if self.pending is not None:
            self.h, self.pending = self.h + self.pending, None
        return self.h

    def read(self, i: int) -> Tensor:
        return self._settle()

    def write(self, i: int, output: Tensor) -> None:
        check_written(self, i)
        self._settle()
        self.pending = output

    def step(self, i: int, sublayer, *args, fused: bool = False) -> None:
        if not fused:  # a sublayer without ``residual=``
            return super().step(i, sublayer, *args)
        if self.pending is None:
            self.pending = sublayer(self.h, *args)
        else:
            self.h, self.pending = sublayer(self.h, *args, residual=self.pending)

    def final(self) -> Tensor:
        return self._settle()


class StandardStream(ResidualStream):
    method = "standard"

    def start(self, embedding: Tensor) -> StreamState:
        return _StandardState(embedding)
