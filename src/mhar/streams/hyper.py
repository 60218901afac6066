"""Static hyper-connections (Zhu et al. 2024) with n parallel streams.

Per sublayer, learned scalars in the layout of the ``hyper-connections`` package's
``static_alpha`` (n, 1 + n) and ``static_beta`` (n): the branch input is
``x = sum_s alpha[s, 0] X_s``; after ``y = f(RMSNorm(x))`` the streams become
``X_i = sum_s alpha[s, 1 + i] X_s + beta_i y``. Initialisation as in the paper and the
package: alpha[:, 0] one-hot at (sublayer index mod n), the mixing block the
identity, beta ones, so at step 0 every stream equals the standard residual. The
streams start as n copies of the embedding; the output is their mean.

The mix and the update run as Triton kernels on CUDA (``hyper_kernels.py``) and as
torch ops elsewhere (the reference); ``set_backend`` or ``MHAR_HYPER_BACKEND`` forces either.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mhar.backends import BackendChoice
from mhar.streams.base import ResidualStream, StreamState, autocast_dtype


# The glue's backend: "auto" is the Triton kernels (hyper_kernels.py) on CUDA: on the H200
# they take a quarter of the reference's time per sublayer at d = 1024, and the graphed
# step runs at 0.88-0.90x of the baseline against 0.46-0.48x (bench/results/step_h200.md,
# session 8).
_BACKEND = BackendChoice("hyper-connection glue", "MHAR_HYPER_BACKEND", "mhar.streams.hyper_kernels")
# stream elements per program (tiles of NP x BLOCK) and warps: 8 elements per thread, so
# bf16 rows move in 16-byte vectors (bench/hyper_mix.py times other choices)
_BLOCK, _WARPS = 1024, 4


def set_backend(name: str | None) -> None:
    """The hyper-connection glue's backend: "reference", "triton" or "auto" (Triton on
    CUDA); ``None`` returns to ``MHAR_HYPER_BACKEND`` (default "auto")."""
    _BACKEND.set(name)


def _mix_reference(alpha: Tensor, X: Tensor) -> tuple[Tensor, Tensor]:
    """The branch input ``sum_s alpha[s, 0] X_s`` and the n mixed streams, as one
    contraction. On the H200 this glue took about 10x its bytes' time per sublayer
    (fwd+bwd 3.5 ms at 16K tokens x 1024, against 0.37 ms; bench/hyper_mix.py), most of
    hyper-connections' gap to the baseline."""
    mix = torch.einsum("st,s...->t...", alpha.to(X.dtype), X)
    # the branch input as its own tensor: the sublayer saves its input for backward,
    # and a view would keep all 1 + n rows of the mix alive (n stream copies per sublayer)
    return mix[0].clone(), mix[1:]


def _update_reference(mixed: Tensor, beta: Tensor, output: Tensor) -> Tensor:
    """The streams after a sublayer: the mixed streams plus beta_i times its output."""
    return mixed + beta.to(output.dtype).view(-1, *([1] * output.dim())) * output.unsqueeze(0)


def _grid(k: int) -> tuple[int]:
    return (-(-k // _BLOCK),)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _alloc(shape, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Every kernel output (tests fill these with NaN to catch unwritten elements)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _streams_view(X: Tensor) -> tuple[Tensor, int]:
    """X (n, ...) with each stream contiguous (a stride-0 expand of one tensor is kept as
    is), and the elements between streams."""
    if not X[0].is_contiguous():
        X = X.contiguous()
    return X, X.stride(0)


class _MixFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alpha: Tensor, X: Tensor, dtype: torch.dtype):
        from mhar.streams.hyper_kernels import _mix_fwd_kernel

        X, stride = _streams_view(X)
        n, k = X.shape[0], X[0].numel()
        a = alpha.detach().float().contiguous()
        x = _alloc(X.shape[1:], dtype, X.device)
        mixed = _alloc((n, *X.shape[1:]), dtype, X.device)
        _mix_fwd_kernel[_grid(k)](X, stride, a, x, mixed, k, N=n, NP=_pow2(n), BLOCK=_BLOCK, num_warps=_WARPS)
        ctx.save_for_backward(a, X)
        ctx.stride, ctx.alpha_dtype = stride, alpha.dtype
        return x, mixed

    @staticmethod
    def backward(ctx, gx: Tensor | None, gm: Tensor | None):
        from mhar.streams.hyper_kernels import _mix_bwd_kernel

        a, X = ctx.saved_tensors
        n, k = X.shape[0], X[0].numel()
        gx = torch.zeros(X.shape[1:], dtype=X.dtype, device=X.device) if gx is None else gx.contiguous()
        gm = torch.zeros((n, *X.shape[1:]), dtype=X.dtype, device=X.device) if gm is None else gm.contiguous()
        grid, np_ = _grid(k), _pow2(n)
        dx = _alloc((n, *X.shape[1:]), X.dtype, X.device)
        p0 = _alloc((grid[0], np_), torch.float32, X.device)
        pm = _alloc((grid[0], np_, np_), torch.float32, X.device)
        _mix_bwd_kernel[grid](X, ctx.stride, a, gx, gm, dx, p0, pm, k, N=n, NP=np_, BLOCK=_BLOCK, num_warps=_WARPS)
        da = torch.cat([p0.sum(0)[:n, None], pm.sum(0)[:n, :n]], dim=1).to(ctx.alpha_dtype)
        return da, dx, None


class _UpdateFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mixed: Tensor, beta: Tensor, output: Tensor):
        from mhar.streams.hyper_kernels import _update_fwd_kernel

        mixed, output = mixed.contiguous(), output.contiguous()
        n, k = mixed.shape[0], output.numel()
        b = beta.detach().float().contiguous()
        out = _alloc(mixed.shape, torch.promote_types(mixed.dtype, output.dtype), mixed.device)
        _update_fwd_kernel[_grid(k)](mixed, b, output, out, k, N=n, NP=_pow2(n), BLOCK=_BLOCK, num_warps=_WARPS)
        ctx.save_for_backward(b, output)
        ctx.beta_dtype = beta.dtype
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        from mhar.streams.hyper_kernels import _update_bwd_kernel

        b, output = ctx.saved_tensors
        g = g.contiguous()
        n, k = g.shape[0], output.numel()
        grid, np_ = _grid(k), _pow2(n)
        dy = _alloc(output.shape, output.dtype, output.device)
        pb = _alloc((grid[0], np_), torch.float32, g.device)
        _update_bwd_kernel[grid](g, b, output, dy, pb, k, N=n, NP=np_, BLOCK=_BLOCK, num_warps=_WARPS)
        return g, pb.sum(0)[:n].to(ctx.beta_dtype), dy


# The kernels run eagerly under torch.compile (a graph break), as the fused loss does.
@torch.compiler.disable
def _mix_triton(alpha: Tensor, X: Tensor) -> tuple[Tensor, Tensor]:
    return _MixFn.apply(alpha, X, autocast_dtype(X))


@torch.compiler.disable
def _update_triton(mixed: Tensor, beta: Tensor, output: Tensor) -> Tensor:
    return _UpdateFn.apply(mixed, beta, output)


def _mix(alpha: Tensor, X: Tensor) -> tuple[Tensor, Tensor]:
    """The branch input and the n mixed streams (the Triton kernels or the reference)."""
    if _BACKEND.use_triton(X.is_cuda, X.dtype) and X[0].numel():
        return _mix_triton(alpha, X)
    return _mix_reference(alpha, X)


def _update(mixed: Tensor, beta: Tensor, output: Tensor) -> Tensor:
    if _BACKEND.use_triton(output.is_cuda, output.dtype) and output.numel():
        return _update_triton(mixed, beta, output)
    return _update_reference(mixed, beta, output)


class _HyperState(StreamState):
    def __init__(self, stream: "HyperStream", embedding: Tensor):
        self.s = stream
        self.X = embedding.unsqueeze(0).expand(stream.n, *embedding.shape)
        self.mixed: Tensor | None = None

    def read(self, i: int) -> Tensor:
        x, self.mixed = _mix(self.s.static_alpha[i], self.X)
        return x

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
