"""One micro-batch's forward and backward captured as a CUDA graph.

A training step launches thousands of kernels: every sublayer's compiled region, every
routing call and its backward, the loss chunks. Where the GPU finishes a kernel faster
than Python and autograd can issue the next (small models, the routed methods' many
small calls), the step is bound by the host. A CUDA graph records the launches once and
replays them with one call, so the host cost of a step becomes a few microseconds.

What the capture needs, and how it is met here:

* static shapes and addresses: the batch is copied into fixed input tensors, and the
  parameters' gradients live at fixed addresses. The first micro-batch of a step replays
  a graph captured with no gradients, so autograd allocated them in the graph's pool and
  every replay *writes* them: no zeroing and no ``grad += ...`` pass over every
  parameter (at 350M those move about 6 GB a step). Later micro-batches replay a second
  graph, captured with the gradients present, that adds into them; it shares the first
  graph's pool (the two never run at once), so it costs no more activation memory;
* everything compiled or autotuned beforehand: a few eager warm-up passes on a side
  stream before the capture (as the PyTorch CUDA-graph recipe does);
* no host synchronisation inside: the forward, the loss and the backward have none
  (the optimiser step and any check of the loss run outside the graph);
* with ``flat_grads`` (multi-process data parallelism, where the ranks' gradients are
  summed after the replay), the gradients are views of one flat buffer, so that one
  all-reduce sums them all: the first graph zeroes the buffer, then its backward adds
  into it (a write and a read of the gradients more than the default);
* host memory the graph reads stays put: the routing kernels' pointer tables made in
  the capture are copied from pinned host buffers by graph nodes on every replay, so
  the graph keeps them (``routing.op.take_captured_tables``).

The memory the captured step needs lives in the graph's private pool for as long as
the graph does; :attr:`GraphedStep.capture_peak_bytes` is the allocator's peak during
the capture, which is the step's footprint (a replay allocates nothing, so peak
statistics taken over replays alone would miss the activations).
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import Tensor

from mhar.routing.op import take_captured_tables


class GraphedStep:
    """``loss_fn(x, y) -> loss`` and ``(loss * scale).backward()`` as CUDA graphs.

    ``run(x, y)`` copies the batch in, replays, and returns the static loss tensor
    (overwritten by the next replay: read or copy it before then). It overwrites the
    parameters' gradients with this batch's; ``run(x, y, accumulate=True)`` adds this
    batch's into them instead (gradient accumulation's later micro-batches). The
    gradients keep their addresses for the graphs' lifetime: never set them to None.
    ``flat_grads=True``: every gradient is a view of :attr:`flat_grad` (the parameters
    must share one dtype).
    """

    def __init__(self, loss_fn: Callable[[Tensor, Tensor], Tensor], params: Iterable[torch.nn.Parameter],
                 x: Tensor, y: Tensor, scale: float = 1.0, warmup: int = 3, flat_grads: bool = False):
        if not x.is_cuda:
            raise ValueError("CUDA graphs need a CUDA device; this batch is on " + str(x.device))
        self.params = [p for p in params if p.requires_grad]
        self.loss_fn, self.scale = loss_fn, scale
        self.x, self.y = x.clone(), y.clone()

        # compile, autotune and fill every cache off the capture (side stream, as the recipe says)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                (loss_fn(self.x, self.y) * scale).backward()
        torch.cuda.current_stream().wait_stream(side)
        self.flat_grad = _flat_gradients(self.params) if flat_grads else None
        if self.flat_grad is None:
            for p in self.params:  # so that the capture allocates them in its pool, and replays write them
                p.grad = None

        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the warm-up's cached blocks: the capture allocates from its own pool
        torch.cuda.reset_peak_memory_stats()
        self.routing_tables: list = []
        self.graph, self.loss = self._capture(pool=None)
        self.capture_peak_bytes = torch.cuda.max_memory_allocated()
        self.accumulate_graph: torch.cuda.CUDAGraph | None = None  # captured on first use
        self.accumulate_loss: Tensor | None = None

    def _capture(self, pool) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            if self.flat_grad is not None and pool is None:  # the first graph starts the step's sum
                self.flat_grad.zero_()
            loss = self.loss_fn(self.x, self.y)
            (loss * self.scale).backward()
        torch.cuda.synchronize()
        # the routing kernels' pointer tables made in the capture: every replay reads them
        self.routing_tables += take_captured_tables()
        return graph, loss

    def run(self, x: Tensor, y: Tensor, accumulate: bool = False) -> Tensor:
        if x.shape != self.x.shape or y.shape != self.y.shape:
            raise ValueError(f"a CUDA graph replays one batch shape: captured x {tuple(self.x.shape)}, "
                             f"y {tuple(self.y.shape)}; got x {tuple(x.shape)}, y {tuple(y.shape)}")
        if accumulate and self.accumulate_graph is None:
            # captured now, with the gradients present: backward adds into them
            self.accumulate_graph, self.accumulate_loss = self._capture(pool=self.graph.pool())
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        if accumulate:
            self.accumulate_graph.replay()
            return self.accumulate_loss
        self.graph.replay()
        return self.loss


# each gradient's view starts at a multiple of this many elements (aligned vector loads)
FLAT_ALIGN = 64


def _flat_gradients(params: list[torch.nn.Parameter]) -> Tensor:
    """One zeroed buffer for all of ``params``' gradients, each ``p.grad`` set to its view."""
    dtypes = {p.dtype for p in params}
    if len(dtypes) != 1:
        raise ValueError(f"flat gradients need one parameter dtype; these have {sorted(map(str, dtypes))}")
    sizes = [-(-p.numel() // FLAT_ALIGN) * FLAT_ALIGN for p in params]
    flat = torch.zeros(sum(sizes), dtype=params[0].dtype, device=params[0].device)
    start = 0
    for p, size in zip(params, sizes):
        p.grad = flat[start:start + p.numel()].view_as(p)
        start += size
    return flat


__all__ = ["GraphedStep"]
