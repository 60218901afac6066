"""The GPU's SM clock and power draw while a benchmark runs, sampled by ``nvidia-smi``.

A training step at these sizes holds an H200 at its power cap, where the clock drops
from 1,980 MHz to about 1,750 (bench/results/step_h200.md, session 21): a step time or
MFU is only comparable with the clock it ran at, so ``mhar bench step`` records both
next to each method's row.

    with ClockSampler(device_index=0) as clocks:
        ...                                 # the timed work
    clocks.summary()  # {"sm_mhz": median, "sm_mhz_p10": tenth percentile, "power_w": median, "samples": n}

Sampling runs in ``nvidia-smi``'s own loop (``-lms``), read by a thread; without
``nvidia-smi`` (or on a CPU) the summary is empty and nothing else changes.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading


def _gpu_id(device_index: int) -> str:
    """nvidia-smi's name for torch's device ``device_index``: its UUID (CUDA_VISIBLE_DEVICES
    renumbers torch's devices, not nvidia-smi's), or the index where torch has no UUID."""
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
        if uuid is not None:
            text = str(uuid)
            return text if text.startswith("GPU-") else f"GPU-{text}"
    except Exception:  # noqa: BLE001 - no CUDA: the index, and nvidia-smi decides
        pass
    return str(device_index)


class ClockSampler:
    """Samples the SM clock (MHz) and power draw (W) every ``period_ms`` between
    ``__enter__`` and ``__exit__``. ``gpu``: nvidia-smi's ``-i`` (default: torch's device
    ``device_index``); ``command``: the program to run (tests pass a fake)."""

    def __init__(self, device_index: int = 0, period_ms: int = 100, gpu: str | None = None,
                 command: str = "nvidia-smi"):
        self.gpu = gpu if gpu is not None else _gpu_id(device_index)
        self.period_ms, self.command = period_ms, command
        self.samples: list[tuple[float, float]] = []
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> "ClockSampler":
        self.samples = []
        exe = shutil.which(self.command)
        if exe is None:
            return self
        try:
            self._proc = subprocess.Popen(
                [exe, "-i", self.gpu, "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                 "-lms", str(self.period_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:  # a line of "[N/A]" or a message instead of numbers is skipped
                self.samples.append((float(parts[0]), float(parts[1])))
            except (IndexError, ValueError):
                continue

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._reader.join(timeout=5)
            self._proc = self._reader = None

    def summary(self) -> dict:
        """Median SM clock, its tenth percentile, median power and the sample count; {}
        without samples."""
        return summarize(self.samples)


def summarize(samples: list[tuple[float, float]]) -> dict:
    """:meth:`ClockSampler.summary` of any (MHz, W) samples, e.g. several samplers' together."""
    if not samples:
        return {}
    mhz = sorted(s[0] for s in samples)
    return {"sm_mhz": statistics.median(mhz), "sm_mhz_p10": mhz[len(mhz) // 10],
            "power_w": statistics.median(s[1] for s in samples), "samples": len(samples)}
