"""The segmented LoRA product: the C kernel (kernels/csrc/lora.c, every code path this machine runs) and the Triton
twin (in the interpreter on CPU) equal the torch reference (kernels/lora.py), which equals the dense product; tokens
without an adapter (-1) are left alone, ranks below the pool's read only their own columns, one call adds several
modules' deltas to their columns of a fused output and leaves the others alone."""

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
from sprig.kernels.lora import LoraBatch, LoraWeights, lora_add_  # noqa: E402

BEST = VecIsa(native_kernels().vec_gemm_best_isa()) if native_kernels() is not None else None
SLOTS = [[0], [-1], [2, 2, 2, 0, 0, -1, -1, 1, 3, 3, 2], [-1, -1, -1], [1] * 40, [0, 1, 2, 3] * 5 + [0, 0, 1]]
# Where the modules sit in y: one module in columns [20, 120) of a wider output (o_proj-like), three side by side
# (q/k/v-like, widths past 64 and under 16), and two with a gap between them (only q and v targeted).
SPANS = {"one": [(20, 100)], "fused": [(0, 70), (70, 13), (83, 40)], "gap": [(3, 50), (90, 37)]}
WIDTH = 140


def _weights(spans, k: int, r: int, seed: int, ranks: tuple[int, ...] = (16, 8, 3, 16),
             dtype: torch.dtype = torch.float32) -> LoraWeights:
    w = LoraWeights.zeros(4, k, r, spans, torch.tensor(ranks, dtype=torch.int64), dtype)
    g = torch.Generator().manual_seed(seed)
    for p in range(len(spans)):
        a_t, b_t = w.module(p)
        for i, rank in enumerate(ranks):  # zero past each slot's rank, as the pool keeps them
            a_t[i, :, :rank] = (torch.randn(k, rank, generator=g) * 0.1).to(dtype)
            b_t[i, :rank] = (torch.randn(rank, b_t.shape[2], generator=g) * 0.1).to(dtype)
    return w


def _case(slots: list[int], dtype: torch.dtype, spans: str = "one", k: int = 72, r: int = 16, seed: int = 0,
          wdtype: torch.dtype = torch.float32):
    w = _weights(SPANS[spans], k, r, seed, dtype=wdtype)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(len(slots), k, generator=g).to(dtype)
    y = torch.randn(len(slots), WIDTH, generator=g).to(dtype)
    return x, y, w, LoraBatch.build(slots)


def _dense(x, y, w: LoraWeights, slots):
    out = y.float().clone()
    for p, (ycol, width, _) in enumerate(w.parts):
        a_t, b_t = w.module(p)
        for t, s in enumerate(slots):
            if s >= 0:
                out[t, ycol : ycol + width] += (x[t].float() @ a_t[s].float()) @ b_t[s].float()
    return out


@pytest.mark.parametrize("wdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("spans", SPANS)
@pytest.mark.parametrize("slots", SLOTS)
def test_reference_equals_the_dense_product_and_skips_base_rows(slots, spans, wdtype):
    x, y, w, batch = _case(slots, torch.float32, spans, wdtype=wdtype)
    before = y.clone()
    lora_add_(y, x, w, batch)
    torch.testing.assert_close(y, _dense(x, before, w, slots), rtol=1e-5, atol=1e-5)
    covered = torch.zeros(WIDTH, dtype=torch.bool)
    for ycol, width, _ in w.parts:
        covered[ycol : ycol + width] = True
    assert torch.equal(y[:, ~covered], before[:, ~covered])  # columns of no module are left alone
    base = [t for t, s in enumerate(slots) if s < 0]
    assert torch.equal(y[base], before[base])


def test_segments_group_runs_of_one_adapter():
    assert LoraBatch.build([2, 2, -1, 0, 0, 0, 2]).segments == ((0, 2, 2), (3, 6, 0), (6, 7, 2))
    assert LoraBatch.build([-1, -1]).empty


@needs_kernels
@pytest.mark.parametrize("isa", path_params(VecIsa, BEST))
@pytest.mark.parametrize("spans", SPANS)
@pytest.mark.parametrize("slots", SLOTS)
@pytest.mark.parametrize("dtype,wdtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                          (torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)])
def test_c_kernel_equals_the_reference(isa, slots, spans, dtype, wdtype):
    """x / y and the pool's weights each fp32 or bf16 (a bf16 model's pool is bf16); sums in fp32 throughout."""
    x, y, w, batch = _case(slots, dtype, spans, seed=len(slots), wdtype=wdtype)
    ref = y.clone()
    lora_add_(ref, x, w, batch)
    cpu_lora_add_(y, x, w, batch, isa=int(isa))
    tol = 1e-5 if dtype == torch.float32 else 1.6e-2  # bf16: one rounding of y either side
    torch.testing.assert_close(y.float(), ref.float(), rtol=tol, atol=tol)


@needs_kernels
@pytest.mark.parametrize("isa", path_params(VecIsa, BEST))
@pytest.mark.parametrize("wdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("r", [5, 40, 64, 80])
def test_c_kernel_takes_every_rank_and_a_long_input(isa, r, wdtype):
    """Ranks that fill 1-4 vectors of 16 and more (three modules: up to 15 at once), K past the unrolled sums."""
    slots = [0, 0, 0, 0, 0, 1, 1, 2, -1, 3, 3, 3]
    w = _weights(SPANS["fused"], 301, r, seed=r, ranks=(r, max(1, r // 2), 1, r), dtype=wdtype)
    x = torch.randn(len(slots), 301)
    y = torch.randn(len(slots), WIDTH)
    ref = y.clone()
    lora_add_(ref, x, w, LoraBatch.build(slots))
    cpu_lora_add_(y, x, w, LoraBatch.build(slots), isa=int(isa))
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)


@needs_kernels
def test_c_kernel_refuses_a_slot_past_the_pool():
    x, y, w, _ = _case([0, 4], torch.float32)
    with pytest.raises(RuntimeError, match="lora_apply refused"):
        cpu_lora_add_(y, x, w, LoraBatch.build([0, 4]))


@pytest.mark.parametrize("wdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("spans", SPANS)
@pytest.mark.parametrize("slots", SLOTS)
def test_triton_twin_equals_the_reference(slots, spans, wdtype):
    pytest.importorskip("triton", reason="triton is not installed", exc_type=ImportError)
    from sprig.kernels.triton_lora import lora_add_ as triton_lora_add_

    x, y, w, batch = _case(slots, torch.float32, spans, seed=7, wdtype=wdtype)
    ref = y.clone()
    lora_add_(ref, x, w, batch)
    triton_lora_add_(y, x, w, batch)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
