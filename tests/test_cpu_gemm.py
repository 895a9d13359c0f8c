"""bf16 linears on AMX tiles (kernels/csrc/amx_gemm.c) equal an fp32 product rounded once to bf16."""

from __future__ import annotations

import pytest
import torch

from sprig.kernels.cpu_gemm import amx_linear, amx_pack, amx_supports
from sprig.kernels.cpu_native import amx_available
from sprig.runtime.model.loader import load_model

pytestmark = pytest.mark.skipif(not amx_available(), reason="this CPU (or kernel) offers no AMX bf16 tiles")


def _case(m: int, k: int, n: int, bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).bfloat16()
    w = (torch.randn(n, k, generator=g) * k**-0.5).bfloat16()
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    ref = x.float() @ w.float().T + (b.float() if bias else 0)
    return x, w, b, ref


@pytest.mark.parametrize("m", [1, 15, 16, 17, 31, 32, 33, 127, 128, 129, 300, 640])
@pytest.mark.parametrize(("k", "n"), [(64, 32), (768, 2304), (2048, 768), (96, 160)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_the_fp32_product_to_bf16_rounding(m, k, n, bias):
    """Rows in whole 32-row blocks, a zero-padded tail block, one 128-row work item or several; with a bias."""
    x, w, b, ref = _case(m, k, n, bias)
    out = amx_linear(x, amx_pack(w), b)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    # fp32 accumulation in another order than `ref`, then one rounding to bf16 (relative step 2^-8).
    assert torch.allclose(out.float(), ref, rtol=2**-8, atol=1e-3)


def test_leading_dims_and_strided_inputs():
    x, w, _, ref = _case(24, 128, 64, False)
    packed = amx_pack(w)
    assert torch.allclose(amx_linear(x.view(2, 12, 128), packed, None).view(24, 64).float(), ref, rtol=2**-8,
                          atol=1e-3)
    wide = torch.cat([x, x], dim=1)[:, :128]  # rows with a stride of 256
    assert torch.equal(amx_linear(wide, packed, None), amx_linear(x, packed, None))
    assert amx_linear(x[:0], packed, None).shape == (0, 64)


def test_supported_shapes_and_dtypes():
    assert amx_supports(torch.zeros(64, 96, dtype=torch.bfloat16))
    assert not amx_supports(torch.zeros(48, 96, dtype=torch.bfloat16))  # 48 output columns: not whole panels
    assert not amx_supports(torch.zeros(64, 80, dtype=torch.bfloat16))  # 80 inputs: not whole tiles
    assert not amx_supports(torch.zeros(64, 96, dtype=torch.float16))


def test_bf16_models_run_their_linears_on_amx_unless_disabled(tiny_paths, monkeypatch):
    path = tiny_paths["tiny-llama"]
    proj = load_model(path, "bfloat16").layers[0].mlp.down_proj
    assert proj.amx is not None and proj.packed is None and proj.weight.is_meta
    monkeypatch.setenv("SPRIG_AMX", "0")
    proj = load_model(path, "bfloat16").layers[0].mlp.down_proj
    assert proj.amx is None and proj.packed is not None
    assert load_model(path, "float16").layers[0].mlp.down_proj.amx is None
