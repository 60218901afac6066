"""Small memsets in a captured CUDA graph, made kernel nodes before it is instantiated
(session 49: tried for the training step, not kept; ``bench/gemm_memsets.py`` uses it).

cuBLAS zeroes a few bytes of its workspace before most of its Hopper product kernels
(``cudaMemsetAsync``), and a captured step keeps each as a memset node: 441 in a 350M
step, 105 at 100M. Under torch.profiler a memset node holds up the chain about 4.3 us
(1.4 us idle before it, 0.8 us for the memset, 2.1 us idle after it), where a kernel
follows a kernel 0.3-0.5 us after it ends. Without the profiler it costs no measurable
time: the step's products replayed with their memsets made kernels took 83.20 ms against
83.01 as captured (350M, eight alternating rounds; ``bench/results/session49/``).

:func:`memsets_to_kernels` replaces every small memset node of a graph with a kernel
node that writes the same bytes, with the same dependencies. It needs the graph before
instantiation (``torch.cuda.CUDAGraph(keep_graph=True)``), the CUDA driver API (through
torch's own handle on ``libcuda``) and NVRTC (``torch.cuda._compile_kernel``) for the
fill kernel; :func:`supported` says whether this torch has all three. Checked on the
H200 against the driver's own memsets (1-, 2- and 4-byte elements, pitched rows) and on
cuBLAS's products and a graphed training step (session 49, call 3).
"""

from __future__ import annotations

import ctypes
import functools

import torch

# memsets up to this many bytes become kernels (cuBLAS's are a few hundred bytes)
MAX_BYTES = 1 << 16

_MEMSET_NODE = 2  # CUgraphNodeType CU_GRAPH_NODE_TYPE_MEMSET

_FILL_SOURCE = r"""
extern "C" __global__ void mhar_graph_fill(unsigned char* dst, unsigned long long pitch, unsigned int value,
                                           unsigned int elem, unsigned long long width,
                                           unsigned long long height) {
    // cuMemsetD2D's semantics: height rows of width elements of elem bytes, rows pitch bytes apart
    unsigned long long n = width * height;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned char* p = dst + (i / width) * pitch + (i % width) * elem;
        if (elem == 4) *(unsigned int*)p = value;
        else if (elem == 2) *(unsigned short*)p = (unsigned short)value;
        else *p = (unsigned char)value;
    }
}
"""


class _MemsetParams(ctypes.Structure):  # CUDA_MEMSET_NODE_PARAMS
    _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t), ("height", ctypes.c_size_t)]


class _KernelParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.POINTER(ctypes.c_void_p)), ("extra", ctypes.POINTER(ctypes.c_void_p)),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


_fill_kernels: dict[int, object] = {}  # per device: the compiled fill kernel (its module stays loaded)


@functools.cache
def supported() -> bool:
    """Whether this torch can keep a captured graph uninstantiated and has the driver
    handle and NVRTC this needs (torch 2.11 and 2.13 on CUDA do)."""
    if not torch.cuda.is_available() or torch.version.cuda is None:
        return False
    try:
        from torch.cuda._utils import _get_gpu_runtime_library  # noqa: F401

        torch.cuda.CUDAGraph(keep_graph=True)
    except (ImportError, TypeError):
        return False
    return hasattr(torch.cuda, "_compile_kernel") and hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph")


def _driver():
    from torch.cuda._utils import _get_gpu_runtime_library

    return _get_gpu_runtime_library()


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"CUDA driver call {what} failed with error {result}")


def _fill_kernel():
    device = torch.cuda.current_device()
    if device not in _fill_kernels:
        _fill_kernels[device] = torch.cuda._compile_kernel(_FILL_SOURCE, "mhar_graph_fill")
    return _fill_kernels[device]


def _nodes(lib, name: str, node: ctypes.c_void_p) -> list[ctypes.c_void_p]:
    """A node's dependencies or dependents (``name``: the driver call), by the call
    without edge data where the driver has it (CUDA 12), else its _v2 with none asked."""
    count = ctypes.c_size_t(0)
    call = getattr(lib, name, None)
    args = () if call is not None else (None,)  # _v2: edgeData, NULL
    call = call if call is not None else getattr(lib, name + "_v2")
    _check(call(node, None, *args, ctypes.byref(count)), name)
    if not count.value:  # (asked again with an array and a count of 0, the driver refuses)
        return []
    out = (ctypes.c_void_p * count.value)()
    _check(call(node, out, *args, ctypes.byref(count)), name)
    return [ctypes.c_void_p(out[i]) for i in range(count.value)]


def _add_dependency(lib, graph: ctypes.c_void_p, src: ctypes.c_void_p, dst: ctypes.c_void_p) -> None:
    call = getattr(lib, "cuGraphAddDependencies", None)
    if call is not None:
        _check(call(graph, ctypes.byref(src), ctypes.byref(dst), ctypes.c_size_t(1)), "cuGraphAddDependencies")
    else:
        _check(lib.cuGraphAddDependencies_v2(graph, ctypes.byref(src), ctypes.byref(dst), None, ctypes.c_size_t(1)),
               "cuGraphAddDependencies_v2")


def memsets_to_kernels(graph: torch.cuda.CUDAGraph | int, max_bytes: int = MAX_BYTES) -> int:
    """Replace every memset node of ``graph`` (captured with ``keep_graph=True``, not yet
    instantiated; or a raw ``CUgraph`` handle) that writes at most ``max_bytes`` with a
    kernel node writing the same bytes, between the same nodes. Returns how many it
    replaced."""
    lib = _driver()
    handle = ctypes.c_void_p(graph if isinstance(graph, int) else graph.raw_cuda_graph())
    count = ctypes.c_size_t(0)
    _check(lib.cuGraphGetNodes(handle, None, ctypes.byref(count)), "cuGraphGetNodes")
    nodes = (ctypes.c_void_p * max(count.value, 1))()
    _check(lib.cuGraphGetNodes(handle, nodes, ctypes.byref(count)), "cuGraphGetNodes")
    fill, replaced = None, 0
    for i in range(count.value):
        node = ctypes.c_void_p(nodes[i])
        kind = ctypes.c_int(-1)
        _check(lib.cuGraphNodeGetType(node, ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value != _MEMSET_NODE:
            continue
        p = _MemsetParams()
        _check(lib.cuGraphMemsetNodeGetParams(node, ctypes.byref(p)), "cuGraphMemsetNodeGetParams")
        if p.width * p.height * p.elementSize > max_bytes or p.elementSize not in (1, 2, 4):
            continue
        fill = fill or _fill_kernel()
        # the kernel's arguments, each by address (the driver copies them when the node is made)
        args = [ctypes.c_uint64(p.dst), ctypes.c_uint64(p.pitch), ctypes.c_uint(p.value),
                ctypes.c_uint(p.elementSize), ctypes.c_uint64(p.width), ctypes.c_uint64(p.height)]
        arg_ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        n = p.width * p.height
        func = fill.func.value if isinstance(fill.func, ctypes.c_void_p) else fill.func
        kp = _KernelParams(func=func, gridDimX=max(1, min(-(-n // 256), 1024)), gridDimY=1, gridDimZ=1,
                           blockDimX=256, blockDimY=1, blockDimZ=1, sharedMemBytes=0,
                           kernelParams=ctypes.cast(arg_ptrs, ctypes.POINTER(ctypes.c_void_p)), extra=None,
                           kern=None, ctx=None)
        deps = _nodes(lib, "cuGraphNodeGetDependencies", node)
        dependents = _nodes(lib, "cuGraphNodeGetDependentNodes", node)
        dep_array = (ctypes.c_void_p * max(len(deps), 1))(*[d.value for d in deps])
        new = ctypes.c_void_p()
        _check(lib.cuGraphAddKernelNode_v2(ctypes.byref(new), handle, dep_array, ctypes.c_size_t(len(deps)),
                                           ctypes.byref(kp)), "cuGraphAddKernelNode_v2")
        for d in dependents:
            _add_dependency(lib, handle, new, d)
        _check(lib.cuGraphDestroyNode(node), "cuGraphDestroyNode")
        replaced += 1
    return replaced


__all__ = ["MAX_BYTES", "memsets_to_kernels", "supported"]
