"""The kernel backend selector: runs with or without triton installed."""

from __future__ import annotations

import pytest
import torch

from sprig.kernels import backend, cpu_native, norm
from sprig.kernels.backend import KernelSet, default_backend, get_kernels


def test_torch_backend_is_the_reference():
    kernels = get_kernels("torch")
    assert isinstance(kernels, KernelSet) and kernels.name == "torch"
    assert kernels.rms_norm is norm.rms_norm


def test_default_off_cuda_is_the_c_kernel_when_it_builds(monkeypatch):
    assert default_backend("cpu") == "cpu"  # gcc is on every machine this project runs on
    assert get_kernels(device="cpu").name == "cpu"
    if not torch.cuda.is_available():
        assert get_kernels().name == "cpu"
    monkeypatch.setattr(cpu_native, "native_kernels", lambda: None)
    assert default_backend("cpu") == "torch"
    with pytest.raises(ValueError, match="needs a C compiler"):
        get_kernels("cpu")


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown kernel backend 'cuda'"):
        get_kernels("cuda")


def test_triton_without_the_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(backend, "_triton_importable", lambda: False)
    assert default_backend("cuda") == "torch"
    with pytest.raises(ValueError, match="needs the triton package"):
        get_kernels("triton", device="cuda")


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setattr(backend, "_triton_importable", lambda: True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        get_kernels("triton", device="cpu")


def test_triton_backend_under_the_interpreter(monkeypatch):
    pytest.importorskip(
        "triton", reason="triton is not installed (pip install 'sprig[gpu]')", exc_type=ImportError
    )
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernels = get_kernels("triton", device="cpu")
    assert kernels.name == "triton"
    assert kernels.paged_attention.__module__ == "sprig.kernels.triton_attention"
