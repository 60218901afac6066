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

from mhar.streams.base import ResidualStream, StreamState


def _mix(alpha: Tensor, X: Tensor) -> Tensor:
    """The (1 + n) weighted sums of the n streams: row 0 the branch input, rows 1..n the
    mixed streams, as one contraction. On the H200 this glue takes about 10x its bytes'
    time per sublayer (fwd+bwd 3.5 ms at 16K tokens x 1024, against 0.37 ms;
    bench/hyper_mix.py), which is most of hyper-connections' gap to the baseline."""
    return torch.einsum("st,s...->t...", alpha.to(X.dtype), X)


def _update(mixed: Tensor, beta: Tensor, output: Tensor) -> Tensor:
    """The streams after a sublayer: the mixed streams plus beta_i times its output."""
    return mixed + beta.to(output.dtype).view(-1, *([1] * output.dim())) * output.unsqueeze(0)


class _HyperState(StreamState):
    def __init__(self, stream: "HyperStream", embedding: Tensor):
        self.s = stream
        self.X = embedding.unsqueeze(0).expand(stream.n, *embedding.shape)
        self.mixed: Tensor | None = None

    def read(self, i: int) -> Tensor:
        mix = _mix(self.s.static_alpha[i], self.X)
        self.mixed = mix[1:]
        # the branch input as its own tensor: the sublayer saves its input for backward,
        # and a view would keep all 1 + n rows of the mix alive (n stream copies per sublayer)
        return mix[0].clone()

    def write(self, i: int, output: Tensor) -> None:
        self.X = _update(self.mixed, self.s.static_beta[i], output)
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

    def start(self, embedding: Tensor) -> StreamState:
        return _HyperState(self, embedding)
