"""A GPU's dense bf16 tensor-core peak, the denominator of MFU.

MFU (model FLOPs utilisation) is the model's training FLOPs per second over the device's
peak. ``mhar bench step`` and ``mhar train`` report it against the peak of the GPU they
run on, looked up here by the name CUDA gives it; a GPU not in the table, or the CPU, has
no MFU unless a peak is given (``--peak-tflops``, the trainer's ``peak_tflops``, or the
``MHAR_PEAK_TFLOPS`` environment variable).

The values are the vendors' datasheet figures for dense bf16 with fp32 accumulation (what
a bf16-autocast matmul runs), without 2:4 sparsity. The SXM H100 and H200 take 989
TFLOP/s, as issue 6's bars do.

    peak, source = device_peak_tflops(torch.device("cuda"))   # 989.0, "NVIDIA H200 (table)"
"""

from __future__ import annotations

import os
import re

import torch

# (pattern searched in the device's name, dense bf16 TFLOP/s); the first match wins, so a
# variant comes before its family (H100 NVL and PCIe before H100)
PEAK_TFLOPS = (
    (r"\bGB200\b", 2500.0),
    (r"\bB200\b", 2250.0),
    (r"\bH[12]00\b.*\bNVL\b", 835.0),
    (r"\bH100\b.*\bPCIe\b", 756.0),
    (r"\bG?H[12]00\b", 989.0),  # SXM H100 (e.g. "NVIDIA H100 80GB HBM3"), H200, GH200
    (r"\bA100\b", 312.0),
    (r"\bL40S\b", 362.0),
    (r"\bL4\b", 121.0),
    (r"\bA10\b", 125.0),
    (r"\bRTX 4090\b", 165.0),
)
ENV = "MHAR_PEAK_TFLOPS"
_HOW = f"give its dense bf16 TFLOP/s as bench step's --peak-tflops, train's peak_tflops= or {ENV}"


def peak_tflops(device_name: str) -> float | None:
    """The table's dense bf16 peak for a device called ``device_name``; None if unknown."""
    for pattern, tflops in PEAK_TFLOPS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return tflops
    return None


def device_peak_tflops(device: torch.device | str, override: float = 0.0) -> tuple[float | None, str]:
    """(peak TFLOP/s, where it came from) for ``device``: ``override`` when positive, else
    ``MHAR_PEAK_TFLOPS`` when set, else the table's value for a CUDA device's name. (None,
    why) when there is none: the CPU, or a GPU not in the table."""
    if override < 0:
        raise ValueError(f"peak TFLOP/s must be > 0 (0: the device's own); got {override}")
    if override > 0:
        return float(override), "given"
    env = os.environ.get(ENV, "").strip()
    if env:
        try:
            value = float(env)
        except ValueError:
            value = float("nan")
        if not 0 < value < float("inf"):
            raise ValueError(f"{ENV}={env!r}: expected a positive number of TFLOP/s")
        return value, ENV
    device = torch.device(device)
    if device.type != "cuda":
        return None, f"no peak for the {device.type} ({_HOW})"
    name = torch.cuda.get_device_name(device)
    value = peak_tflops(name)
    if value is None:
        return None, f"{name} is not in mhar.gpu_peak's table ({_HOW})"
    return value, f"{name} (table)"
