"""mhar.gpu_peak: the dense bf16 peak that MFU divides by, from the GPU's name, a given
value or MHAR_PEAK_TFLOPS; none for the CPU or a GPU the table does not know."""

import pytest
import torch

from mhar.gpu_peak import ENV, device_peak_tflops, peak_tflops


@pytest.mark.parametrize("name, tflops", [
    ("NVIDIA H100 80GB HBM3", 989.0),  # SXM, as torch names it
    ("NVIDIA H200", 989.0),
    ("NVIDIA GH200 480GB", 989.0),
    ("NVIDIA H100 PCIe", 756.0),  # variants before their family
    ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200 NVL", 835.0),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100-PCIE-40GB", 312.0),
    ("NVIDIA L40S", 362.0),
    ("NVIDIA L4", 121.0),
    ("NVIDIA A10", 125.0),
    ("NVIDIA GeForce RTX 4090", 165.0),
    ("NVIDIA B200", 2250.0),
    ("NVIDIA GB200", 2500.0),
    ("NVIDIA L40", None),  # not L4 or L40S
    ("NVIDIA A10G", None),  # not A10
    ("Tesla V100-SXM2-16GB", None),  # no bf16
])
def test_table(name, tflops):
    assert peak_tflops(name) == tflops


def test_given_then_environment_then_table(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    peak, why = device_peak_tflops("cpu")
    assert peak is None and "no peak for the cpu" in why
    monkeypatch.setenv(ENV, "312")
    assert device_peak_tflops("cpu") == (312.0, ENV)
    assert device_peak_tflops("cpu", 100.0) == (100.0, "given")  # the argument beats the environment
    for bad in ("fast", "0", "-5", "inf", "nan"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(ValueError, match=ENV):
            device_peak_tflops("cpu")
    with pytest.raises(ValueError, match="must be > 0"):
        device_peak_tflops("cpu", -1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_this_gpu(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    name = torch.cuda.get_device_name()
    peak, source = device_peak_tflops("cuda")
    assert peak == peak_tflops(name) and source.startswith(name)
