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
from torch.autograd.function import once_differentiable

from mhar.backends import BackendChoice
from mhar.streams.base import ResidualStream, StreamState, autocast_dtype, check_index, check_written


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


def _mix_kernels(a: Tensor, X: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The branch input and the n mixed streams, by the Triton kernel (no autograd)."""
    from mhar.streams.hyper_kernels import _mix_fwd_kernel

    X, stride = _streams_view(X)
    n, k = X.shape[0], X[0].numel()
    x = _alloc(X.shape[1:], dtype, X.device)
    mixed = _alloc((n, *X.shape[1:]), dtype, X.device)
    _mix_fwd_kernel[_grid(k)](X, stride, a, x, mixed, k, N=n, NP=_pow2(n), BLOCK=_BLOCK, num_warps=_WARPS)
    return x, mixed


def _update_kernels(mixed: Tensor, b: Tensor, output: Tensor) -> Tensor:
    """The streams after a sublayer, by the Triton kernel (no autograd)."""
    from mhar.streams.hyper_kernels import _update_fwd_kernel

    n, k = mixed.shape[0], output.numel()
    out = _alloc(mixed.shape, torch.promote_types(mixed.dtype, output.dtype), mixed.device)
    _update_fwd_kernel[_grid(k)](mixed, b, output, out, k, N=n, NP=_pow2(n), BLOCK=_BLOCK, num_warps=_WARPS)
    return out


def recompute_starts(num_sublayers: int, last: int) -> list[int]:
    """The sublayers that start a recompute segment (``_Segment``): each segment covers
    half of the sublayers still left, until the rest fit in one of at most ``last``
    (24 sublayers, last 6: segments of 12, 6 and 6). Backward reaches the last segment
    first, while every activation is still held, so that one is short; it frees each
    sublayer's activations as it goes, so the earlier segments' recomputed copies fit and
    they can be long: few segments, so few kept copies at the forward's peak.
    Every sublayer but a segment's first is recomputed once, whatever the lengths."""
    if last < 1:
        raise ValueError(f"the last recompute segment must hold at least one sublayer, got {last}")
    starts, rest = [0], num_sublayers
    while rest > last:
        starts.append(starts[-1] + rest // 2)
        rest -= rest // 2
    return starts


class _Segment:
    """Consecutive sublayers whose streams backward recomputes (``recompute_starts``):
    only the first sublayer's input streams are kept (``X0``), with each sublayer's
    alpha, beta and output, which the update's backward keeps anyway. A mix's backward
    needs its input streams (for alpha's gradient); the first one asked for, the
    segment's last, recomputes them all from ``X0`` by the forward kernels
    (deterministic, so the same values), and each is dropped once used. A segment of S
    sublayers keeps n stream copies instead of n S, and holds n (S - 1) recomputed ones
    at the start of its backward."""

    def __init__(self, X0: Tensor, dtype: torch.dtype):
        # detached: the segment is reachable from its autograd nodes (ctx.segment), so a
        # tensor with a grad_fn here closes a reference cycle through the graph, which
        # Python's collector cannot see into: every step's graph leaked, and under CUDA
        # graph capture the last iteration's AccumulateGrad nodes broke the capture
        self.X0, self.dtype = X0.detach(), dtype
        self.steps: list[list] = []  # [alpha fp32, beta fp32, output] per sublayer, in order
        self.cache: list[Tensor | None] | None = None

    def streams(self, pos: int) -> Tensor:
        """The input streams of the segment's sublayer ``pos``."""
        if pos == 0:
            return self.X0
        if self.cache is None or self.cache[pos] is None:  # first ask (or a second backward)
            X, cache = self.X0, [None]
            for a, b, y in self.steps[:pos]:
                X = _update_kernels(_mix_kernels(a, X, self.dtype)[1], b, y)
                cache.append(X)
            self.cache = cache
        X, self.cache[pos] = self.cache[pos], None
        return X


class _MixFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alpha: Tensor, X: Tensor, dtype: torch.dtype, segment: _Segment | None, pos: int):
        a = alpha.detach().float().contiguous()
        x, mixed = _mix_kernels(a, X, dtype)
        ctx.segment, ctx.pos, ctx.alpha_dtype = segment, pos, alpha.dtype
        if segment is None or pos == 0:
            ctx.save_for_backward(a, X)  # the input streams (a segment's first: its X0)
        else:
            ctx.save_for_backward(a)
        if segment is not None:
            segment.steps.append([a, None, None])
        return x, mixed

    @staticmethod
    @once_differentiable  # kernels: a second order would miss their terms
    def backward(ctx, gx: Tensor | None, gm: Tensor | None):
        from mhar.streams.hyper_kernels import _mix_bwd_kernel

        a, *saved = ctx.saved_tensors
        X = saved[0] if saved else ctx.segment.streams(ctx.pos)
        X, stride = _streams_view(X)
        n, k = X.shape[0], X[0].numel()
        gx = torch.zeros(X.shape[1:], dtype=X.dtype, device=X.device) if gx is None else gx.contiguous()
        gm = torch.zeros((n, *X.shape[1:]), dtype=X.dtype, device=X.device) if gm is None else gm.contiguous()
        grid, np_ = _grid(k), _pow2(n)
        dx = _alloc((n, *X.shape[1:]), X.dtype, X.device)
        p0 = _alloc((grid[0], np_), torch.float32, X.device)
        pm = _alloc((grid[0], np_, np_), torch.float32, X.device)
        _mix_bwd_kernel[grid](X, stride, a, gx, gm, dx, p0, pm, k, N=n, NP=np_, BLOCK=_BLOCK, num_warps=_WARPS)
        da = torch.cat([p0.sum(0)[:n, None], pm.sum(0)[:n, :n]], dim=1).to(ctx.alpha_dtype)
        return da, dx, None, None, None


class _UpdateFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mixed: Tensor, beta: Tensor, output: Tensor, segment: _Segment | None):
        mixed, output = mixed.contiguous(), output.contiguous()
        b = beta.detach().float().contiguous()
        out = _update_kernels(mixed, b, output)
        ctx.save_for_backward(b, output)
        ctx.beta_dtype = beta.dtype
        if segment is not None:  # this sublayer's step, for recomputing the streams after it
            segment.steps[-1][1:] = [b, output.detach()]  # detached: see _Segment.__init__
        return out

    @staticmethod
    @once_differentiable  # kernels: a second order would miss their terms
    def backward(ctx, g: Tensor):
        from mhar.streams.hyper_kernels import _update_bwd_kernel

        b, output = ctx.saved_tensors
        g = g.contiguous()
        n, k = g.shape[0], output.numel()
        grid, np_ = _grid(k), _pow2(n)
        dy = _alloc(output.shape, output.dtype, output.device)
        pb = _alloc((grid[0], np_), torch.float32, g.device)
        _update_bwd_kernel[grid](g, b, output, dy, pb, k, N=n, NP=np_, BLOCK=_BLOCK, num_warps=_WARPS)
        return g, pb.sum(0)[:n].to(ctx.beta_dtype), dy, None


# The kernels run eagerly under torch.compile (a graph break), as the fused loss does.
@torch.compiler.disable
def _mix_triton(alpha: Tensor, X: Tensor, segment: _Segment | None = None, pos: int = 0) -> tuple[Tensor, Tensor]:
    return _MixFn.apply(alpha, X, autocast_dtype(X), segment, pos)


@torch.compiler.disable
def _update_triton(mixed: Tensor, beta: Tensor, output: Tensor, segment: _Segment | None = None) -> Tensor:
    return _UpdateFn.apply(mixed, beta, output, segment)


def _use_kernels(t: Tensor) -> bool:
    return _BACKEND.use_triton(t.is_cuda, t.dtype) and t.numel() > 0


def _mix(alpha: Tensor, X: Tensor, segment: _Segment | None = None, pos: int = 0) -> tuple[Tensor, Tensor]:
    """The branch input and the n mixed streams (the Triton kernels or the reference;
    ``segment`` applies to the kernels only)."""
    if _use_kernels(X[0]):
        return _mix_triton(alpha, X, segment, pos)
    return _mix_reference(alpha, X)


def _update(mixed: Tensor, beta: Tensor, output: Tensor, segment: _Segment | None = None) -> Tensor:
    if _use_kernels(output):
        return _update_triton(mixed, beta, output, segment)
    return _update_reference(mixed, beta, output)


class _HyperState(StreamState):
    def __init__(self, stream: "HyperStream", embedding: Tensor):
        self.s = stream
        self.X = embedding.unsqueeze(0).expand(stream.n, *embedding.shape)
        self.mixed: Tensor | None = None
        self.segment: _Segment | None = None
        self.segment_start = 0

    def read(self, i: int) -> Tensor:
        check_index(i, self.s.num_sublayers)
        # streams recomputed in backward: with the kernels, while autograd records
        if self.s.segment_starts and torch.is_grad_enabled() and _use_kernels(self.X[0]):
            if i in self.s.segment_starts:
                self.segment, self.segment_start = _Segment(self.X, autocast_dtype(self.X)), i
        else:
            self.segment = None
        pos = i - self.segment_start if self.segment is not None else 0
        x, self.mixed = _mix(self.s.static_alpha[i], self.X, self.segment, pos)
        return x

    def write(self, i: int, output: Tensor) -> None:
        check_written(self, i)
        self.X = _update(self.mixed, self.s.static_beta[i], output, self.segment)
        self.mixed = None

    def final(self) -> Tensor:
        return self.X.mean(0)


class HyperStream(ResidualStream):
    method = "hyper"

    def __init__(self, d_model: int, num_sublayers: int, n: int = 4, recompute: int = 0):
        super().__init__(d_model, num_sublayers)
        if n < 1:
            raise ValueError(f"HyperStream: n={n} must be >= 1")
        if recompute < 0:
            raise ValueError(f"HyperStream: recompute={recompute} must be >= 0 (0: off)")
        self.n = n
        # recompute > 0: keep the n streams only where a recompute segment starts and
        # recompute the others in backward (the Triton glue only; _Segment, recompute_starts)
        self.segment_starts = frozenset(recompute_starts(num_sublayers, recompute)) if recompute else frozenset()
        alpha = torch.zeros(num_sublayers, n, 1 + n)
        for i in range(num_sublayers):
            alpha[i, i % n, 0] = 1.0
            alpha[i, :, 1:] = torch.eye(n)
        self.static_alpha = nn.Parameter(alpha)
        self.static_beta = nn.Parameter(torch.ones(num_sublayers, n))

    def start(self, embedding: Tensor) -> StreamState:
        return _HyperState(self, embedding)
