"""Static hyper-connections (Zhu et al. 2024) with n parallel streams.

Per sublayer, learned scalars in the layout of the ``hyper-connections`` package's
``static_alpha`` (n, 1 + n) and ``static_beta`` (n): the branch input is
``x = sum_s alpha[s, 0] X_s``; after ``y = f(RMSNorm(x))`` the streams become
``X_i = sum_s alpha[s, 1 + i] X_s + beta_i y``. Initialisation as in the paper and the
package: alpha[:, 0] one-hot at (sublayer index mod n), the mixing block the
identity, beta ones, so at step 0 every stream equals the standard residual. The
streams start as n copies of the embedding; the output is their mean.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mhar.streams.base import ResidualStream, StreamState, autocast_dtype


def _mix(alpha: Tensor, X: Tensor) -> Tensor:
    """The (1 + n) weighted sums of the n streams: row 0 the branch input, rows 1..n the
    mixed streams, as one contraction (eager)."""
    return torch.einsum("st,s...->t...", alpha.to(X.dtype), X)


def _mix_pointwise(alpha: Tensor, X: Tensor) -> Tensor:
    """:func:`_mix` as broadcast products summed over the streams, for torch.compile: it
    becomes one pass over X forward, and backward one pass for X's gradient plus one
    reduction for alpha's. The contraction would lower to matrix products of 4-5 rows,
    whose alpha gradient reduces over every element of the stream (K = tokens x d)."""
    dtype = autocast_dtype(X)  # what the contraction gives under autocast (its inputs' dtype otherwise)
    a = alpha.to(dtype).t().reshape(alpha.shape[1], alpha.shape[0], *([1] * (X.dim() - 1)))
    return (a * X.to(dtype).unsqueeze(0)).sum(1)


def _update(mixed: Tensor, beta: Tensor, output: Tensor) -> Tensor:
    """The streams after a sublayer: the mixed streams plus beta_i times its output."""
    return mixed + beta.to(output.dtype).view(-1, *([1] * output.dim())) * output.unsqueeze(0)


class _HyperState(StreamState):
    def __init__(self, stream: "HyperStream", embedding: Tensor):
        self.s = stream
        self.X = embedding.unsqueeze(0).expand(stream.n, *embedding.shape)
        self.mixed: Tensor | None = None

    def read(self, i: int) -> Tensor:
        mix = self.s.mix(self.s.static_alpha[i], self.X)
        self.mixed = mix[1:]
        return mix[0]

    def write(self, i: int, output: Tensor) -> None:
        self.X = self.s.update(self.mixed, self.s.static_beta[i], output)
        self.mixed = None

    def final(self) -> Tensor:
        return self.X.mean(0)


class HyperStream(ResidualStream):
    method = "hyper"

    def __init__(self, d_model: int, num_sublayers: int, n: int = 4):
        super().__init__(d_model, num_sublayers)
        self.n = n
        alpha = torch.zeros(num_sublayers, n, 1 + n)
        for i in range(num_sublayers):
            alpha[i, i % n, 0] = 1.0
            alpha[i, :, 1:] = torch.eye(n)
        self.static_alpha = nn.Parameter(alpha)
        self.static_beta = nn.Parameter(torch.ones(num_sublayers, n))
        self.mix, self.update = _mix, _update

    def compile_regions(self, **compile_kwargs) -> None:
        self.mix = torch.compile(_mix_pointwise, **compile_kwargs)
        self.update = torch.compile(_update, **compile_kwargs)

    def start(self, embedding: Tensor) -> StreamState:
        return _HyperState(self, embedding)
