"""The Triton fused MoE (kernels/triton_moe.py) equals the torch reference (kernels/moe.py), in the interpreter on
CPU; and a MoE model's engine on the Triton kernel set gives the greedy tokens of the torch set."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the Triton kernels
pytest.importorskip(
    "triton", reason="triton is not installed (pip install 'sprig[gpu]')", exc_type=ImportError
)

from sprig.kernels import triton_moe  # noqa: E402
from sprig.kernels.moe import fused_moe, route  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# bf16 only on CUDA: the interpreter's bf16 casts truncate and its bf16 tl.dot is wrong (see test_triton_block_quant)
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
pytestmark = pytest.mark.timeout(120)


def _case(t: int, e: int, h: int, i: int, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g)
    w13 = torch.randn(e, 2 * i, h, generator=g) * h**-0.5
    w2 = torch.randn(e, h, i, generator=g) * i**-0.5
    return [v.to(DEVICE, dtype) for v in (x, w13, w2)] + [torch.randn(t, e, generator=g).to(DEVICE)]


def test_align_slots_pads_each_expert_to_whole_tiles():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]])
    slots, tile_expert = triton_moe.align_slots(ids, 4)
    m = triton_moe.BLOCK_M
    assert tile_expert.tolist() == [0, 1, 2]  # expert 3 has no slot, so no tile
    assert slots[:2].tolist() == [1, 4] and slots[m : m + 1].tolist() == [3] and slots[2 * m : 2 * m + 3].tolist() \
        == [0, 2, 5]
    assert (slots == ids.numel()).sum() == 3 * m - ids.numel()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("t", "e", "h", "i", "k"), [(1, 4, 32, 48, 2), (21, 6, 40, 24, 3), (37, 3, 64, 16, 1)])
@pytest.mark.parametrize("renormalize", [False, True])
def test_triton_fused_moe_equals_the_reference(dtype, t, e, h, i, k, renormalize):
    x, w13, w2, logits = _case(t, e, h, i, dtype, seed=t)
    got = triton_moe.fused_moe(x, w13, w2, logits, k, renormalize)
    ref = fused_moe(x, w13, w2, logits, k, renormalize)
    assert got.dtype == x.dtype and got.shape == x.shape
    torch.testing.assert_close(got.float(), ref.float(), rtol=TOL[dtype], atol=TOL[dtype])


def test_no_tokens():
    x, w13, w2, logits = _case(0, 4, 32, 16, torch.float32, seed=0)
    assert triton_moe.fused_moe(x, w13, w2, logits, 2, True).shape == (0, 32)


def test_route_is_shared_with_the_reference():
    assert triton_moe.route is route  # one routing implementation: the twins differ only in the products


def test_moe_engine_on_triton_gives_the_torch_kernels_greedy_tokens():
    from test_triton_engine import SCRIPT

    from sprig.runtime.model.checkpoints import checkpoint_path

    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(checkpoint_path("tiny-qwen2-moe")), "auto"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["triton"] == out["torch"]
