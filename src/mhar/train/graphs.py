"""One micro-batch's forward and backward captured as a CUDA graph.

A training step launches thousands of kernels: every sublayer's compiled region, every
routing call and its backward, the loss chunks. Where the GPU finishes a kernel faster
than Python and autograd can issue the next (small models, the routed methods' many
small calls), the step is bound by the host. A CUDA graph records the launches once and
replays them with one call, so the host cost of a step becomes a few microseconds.

What the capture needs, and how it is met here:

* static shapes and addresses: the batch is copied into fixed input tensors, and the
  parameters' gradients are allocated before the capture so that backward adds into
  them in place (``grad += ...``) on every replay; gradients are zeroed in place
  (:meth:`GraphedStep.zero_grad`), never set to None;
* everything compiled or autotuned beforehand: a few eager warm-up passes on a side
  stream before the capture (as the PyTorch CUDA-graph recipe does);
* no host synchronisation inside: the forward, the loss and the backward have none
  (the optimiser step and any check of the loss run outside the graph);
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
    """``loss_fn(x, y) -> loss`` and ``(loss * scale).backward()`` as one CUDA graph.

    ``run(x, y)`` copies the batch in, replays, and returns the static loss tensor
    (overwritten by the next replay: read or copy it before then). Gradients
    accumulate over runs until :meth:`zero_grad`.
    """

    def __init__(self, loss_fn: Callable[[Tensor, Tensor], Tensor], params: Iterable[torch.nn.Parameter],
                 x: Tensor, y: Tensor, scale: float = 1.0, warmup: int = 3):
        if not x.is_cuda:
            raise ValueError("CUDA graphs need a CUDA device; this batch is on " + str(x.device))
        self.params = [p for p in params if p.requires_grad]
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.x, self.y = x.clone(), y.clone()

        # compile, autotune and fill every cache off the capture (side stream, as the recipe says)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                (loss_fn(self.x, self.y) * scale).backward()
        torch.cuda.current_stream().wait_stream(side)
        self.zero_grad()

        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the warm-up's cached blocks: the capture allocates from its own pool
        torch.cuda.reset_peak_memory_stats()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = loss_fn(self.x, self.y)
            (self.loss * scale).backward()
        torch.cuda.synchronize()
        # the routing kernels' pointer tables made in the capture: every replay reads them
        self.routing_tables = take_captured_tables()
        self.capture_peak_bytes = torch.cuda.max_memory_allocated()

    def zero_grad(self) -> None:
        """Zero the gradients in place (their addresses are baked into the graph)."""
        torch._foreach_zero_([p.grad for p in self.params])

    def run(self, x: Tensor, y: Tensor) -> Tensor:
        if x.shape != self.x.shape or y.shape != self.y.shape:
            raise ValueError(f"a CUDA graph replays one batch shape: captured x {tuple(self.x.shape)}, "
                             f"y {tuple(self.y.shape)}; got x {tuple(x.shape)}, y {tuple(y.shape)}")
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.graph.replay()
        return self.loss


__all__ = ["GraphedStep"]
