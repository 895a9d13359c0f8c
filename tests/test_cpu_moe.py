"""The fused MoE C kernel (kernels/csrc/moe.c) equals the torch reference (kernels/moe.py) in every code path this
machine can run, bf16 and fp32 experts, with and without renormalization; and a MoE model runs it end to end."""

from __future__ import annotations

import pytest
import torch
from kernel_paths import needs_kernels, path_params

from sprig.kernels.cpu_gemm import VecIsa
from sprig.kernels.cpu_moe import cpu_fused_moe, cpu_moe_supports, pack_experts
from sprig.kernels.cpu_native import native_kernels
from sprig.kernels.moe import fused_moe
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.moe import Experts

BEST = VecIsa(native_kernels().vec_gemm_best_isa()) if native_kernels() is not None else None
ISAS = path_params(VecIsa, BEST)
pytestmark = needs_kernels


def _case(t: int, e: int, h: int, i: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g).to(dtype)
    w13 = (torch.randn(e, 2 * i, h, generator=g) * h**-0.5).to(dtype)
    w2 = (torch.randn(e, h, i, generator=g) * i**-0.5).to(dtype)
    return x, w13, w2, torch.randn(t, e, generator=g)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(("t", "e", "h", "i", "k"), [(1, 8, 64, 96, 2), (7, 6, 128, 40, 3), (70, 4, 32, 48, 1),
                                                      (33, 16, 96, 64, 4)])
@pytest.mark.parametrize("renormalize", [False, True])
def test_bf16_experts_equal_the_reference(isa, t, e, h, i, k, renormalize):
    x, w13, w2, logits = _case(t, e, h, i, torch.bfloat16, seed=t)
    ref = fused_moe(x, w13, w2, logits, k, renormalize).float()
    got = cpu_fused_moe(x, pack_experts(w13, w2, isa), logits, k, renormalize).float()
    # The reference rounds the same intermediates to bf16; sums in another order differ by a rounding or two.
    torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2)
    assert (got - ref).abs().mean() < 2e-3


@pytest.mark.parametrize(("t", "e", "h", "i", "k"), [(1, 8, 64, 96, 2), (9, 6, 100, 70, 3), (130, 5, 16, 8, 5)])
@pytest.mark.parametrize("renormalize", [False, True])
def test_fp32_experts_equal_the_reference(t, e, h, i, k, renormalize):
    x, w13, w2, logits = _case(t, e, h, i, torch.float32, seed=t)
    got = cpu_fused_moe(x, pack_experts(w13, w2), logits, k, renormalize)
    torch.testing.assert_close(got, fused_moe(x, w13, w2, logits, k, renormalize), rtol=1e-5, atol=1e-5)


def test_no_tokens_and_idle_experts():
    x, w13, w2, logits = _case(0, 4, 32, 16, torch.float32)
    assert cpu_fused_moe(x, pack_experts(w13, w2), logits, 2, True).shape == (0, 32)
    x, w13, w2, _ = _case(3, 4, 32, 16, torch.float32)
    logits = torch.tensor([[9.0, 0.0, 8.0, 0.0]] * 3)  # experts 1 and 3 get no token
    torch.testing.assert_close(cpu_fused_moe(x, pack_experts(w13, w2), logits, 2, False),
                               fused_moe(x, w13, w2, logits, 2, False))


def test_odd_bf16_sizes_stay_on_the_reference():
    assert not cpu_moe_supports(torch.zeros(4, 2 * 3, 8, dtype=torch.bfloat16))  # I odd: no VNNI pairs
    assert cpu_moe_supports(torch.zeros(4, 2 * 4, 8, dtype=torch.bfloat16))


@pytest.mark.parametrize("name", ["tiny-qwen2-moe", "tiny-mixtral"])
def test_bf16_model_on_the_c_kernel_matches_the_torch_kernels(name):
    path = checkpoint_path(name)
    fast = load_model(path, "bfloat16", attention_backend="cpu")
    ref = load_model(path, "bfloat16", attention_backend="torch")
    assert all(m.packed is not None for m in fast.modules() if isinstance(m, Experts))
    assert all(m.packed is None for m in ref.modules() if isinstance(m, Experts))
    x = torch.randn(5, fast.cfg.hidden_size, generator=torch.Generator().manual_seed(0)).bfloat16()
    for a, b in zip(fast.layers, ref.layers, strict=True):
        torch.testing.assert_close(a.mlp(x).float(), b.mlp(x).float(), rtol=3e-2, atol=3e-2)
