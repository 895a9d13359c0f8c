"""The segmented LoRA product: the C kernel (kernels/csrc/lora.c, every code path this machine runs) and the Triton
twin (in the interpreter on CPU) equal the torch reference (kernels/lora.py), which equals the dense product; tokens
without an adapter (-1) are left alone, ranks below the pool's read only their own columns, y may be a column slice
of a fused output."""

from __future__ import annotations

import os

import pytest
import torch
from kernel_paths import needs_kernels, path_params

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the Triton kernels

from sprig.kernels.cpu_gemm import VecIsa  # noqa: E402
from sprig.kernels.cpu_lora import lora_add_ as cpu_lora_add_  # noqa: E402
from sprig.kernels.cpu_native import native_kernels  # noqa: E402
from sprig.kernels.lora import LoraBatch, lora_add_  # noqa: E402

BEST = VecIsa(native_kernels().vec_gemm_best_isa()) if native_kernels() is not None else None
SLOTS = [[0], [-1], [2, 2, 2, 0, 0, -1, -1, 1, 3, 3, 2], [-1, -1, -1], [1] * 40]


def _pool(s: int, k: int, n: int, r: int, ranks: list[int], seed: int):
    g = torch.Generator().manual_seed(seed)
    a_t = torch.randn(s, k, r, generator=g) * 0.1
    b_t = torch.randn(s, r, n, generator=g) * 0.1
    for i, rank in enumerate(ranks):  # zero past each slot's rank, as the pool keeps them
        a_t[i, :, rank:] = 0
        b_t[i, rank:] = 0
    return a_t, b_t, torch.tensor(ranks, dtype=torch.int64)


def _case(slots: list[int], dtype: torch.dtype, k: int = 72, n: int = 100, r: int = 16, seed: int = 0):
    a_t, b_t, ranks = _pool(4, k, n, r, [16, 8, 3, 16], seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(len(slots), k, generator=g).to(dtype)
    fused = torch.randn(len(slots), n + 40, generator=g).to(dtype)  # y is columns [20, 20 + n) of a fused output
    return x, fused, a_t, b_t, ranks, LoraBatch.build(slots)


def _dense(x, y, a_t, b_t, slots):
    out = y.float().clone()
    for t, s in enumerate(slots):
        if s >= 0:
            out[t] += (x[t].float() @ a_t[s]) @ b_t[s]
    return out


@pytest.mark.parametrize("slots", SLOTS)
def test_reference_equals_the_dense_product_and_skips_base_rows(slots):
    x, fused, a_t, b_t, ranks, batch = _case(slots, torch.float32)
    before = fused.clone()
    lora_add_(fused[:, 20:120], x, a_t, b_t, ranks, batch)
    torch.testing.assert_close(fused[:, 20:120], _dense(x, before[:, 20:120], a_t, b_t, slots), rtol=1e-5, atol=1e-5)
    assert torch.equal(fused[:, :20], before[:, :20]) and torch.equal(fused[:, 120:], before[:, 120:])
    base = [t for t, s in enumerate(slots) if s < 0]
    assert torch.equal(fused[base], before[base])


def test_segments_group_runs_of_one_adapter():
    assert LoraBatch.build([2, 2, -1, 0, 0, 0, 2]).segments == ((0, 2, 2), (3, 6, 0), (6, 7, 2))
    assert LoraBatch.build([-1, -1]).empty


@needs_kernels
@pytest.mark.parametrize("isa", path_params(VecIsa, BEST))
@pytest.mark.parametrize("slots", SLOTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_c_kernel_equals_the_reference(isa, slots, dtype):
    x, fused, a_t, b_t, ranks, batch = _case(slots, dtype, seed=len(slots))
    ref = fused.clone()
    lora_add_(ref[:, 20:120], x, a_t, b_t, ranks, batch)
    cpu_lora_add_(fused[:, 20:120], x, a_t, b_t, ranks, batch, isa=int(isa))
    tol = 1e-5 if dtype == torch.float32 else 1.6e-2  # bf16: one rounding of y either side
    torch.testing.assert_close(fused.float(), ref.float(), rtol=tol, atol=tol)


@needs_kernels
def test_c_kernel_refuses_a_slot_past_the_pool():
    x, fused, a_t, b_t, ranks, _ = _case([0, 4], torch.float32)
    with pytest.raises(RuntimeError, match="lora_apply refused"):
        cpu_lora_add_(fused[:, :100], x, a_t, b_t, ranks, LoraBatch.build([0, 4]))


@pytest.mark.parametrize("slots", SLOTS)
def test_triton_twin_equals_the_reference(slots):
    pytest.importorskip("triton", reason="triton is not installed", exc_type=ImportError)
    from sprig.kernels.triton_lora import lora_add_ as triton_lora_add_

    x, fused, a_t, b_t, ranks, batch = _case(slots, torch.float32, seed=7)
    ref = fused.clone()
    lora_add_(ref[:, 20:120], x, a_t, b_t, ranks, batch)
    triton_lora_add_(fused[:, 20:120], x, a_t, b_t, ranks, batch)
    torch.testing.assert_close(fused, ref, rtol=1e-5, atol=1e-5)
