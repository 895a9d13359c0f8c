"""Triton GGML block-quant matmul and row lookup vs the torch reference `ggml_quants.dequantize` (interpreter on CPU).

Error bounds, against the product computed in float64 from the reference's float32 weights W (S = |x| @ |W|.T):
- fp32 accumulation, in any order, on either side: at most K * 2^-24 * S (the classic gamma_K bound);
- the GEMM rounds each decoded weight to x's dtype before `tl.dot` (as the torch path casts before F.linear):
  u_in * S, plus for fp16 an absolute 2^-25 per weight below fp16's normal range (2^-25 * sum |x|);
- the output's rounding to x's dtype: u_out * (|y| + the above), and for fp16 2^-25 below its normal range.
A single wrong weight moves y by |x_k W_jk|, about S / K, which is above every bound here (K <= 512).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the Triton kernels
pytest.importorskip(
    "triton", reason="triton is not installed (pip install 'sprig[gpu]')", exc_type=ImportError
)

from test_ggml_quants import random_rows  # noqa: E402

from sprig.kernels import triton_block_quant as tbq  # noqa: E402
from sprig.kernels.ggml_quants import GGMLType, dequantize  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# bf16 only on CUDA: the interpreter's bf16 casts truncate and its bf16 tl.dot is wrong (seen on 3-line kernels)
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
UNIT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}  # unit roundoff
pytestmark = pytest.mark.timeout(60)


def _shape(qtype: GGMLType) -> tuple[int, int]:
    """N and K with partial tiles: N = 24 (GEMV tiles of 16, GEMM tiles of 64); K = 96 for 32-weight blocks
    (k tiles of 64 and 128), two super-blocks for the K-quants."""
    return 24, 96 if qtype.block_size == 32 else 512


def _weight(qtype: GGMLType, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    raw = random_rows(qtype, n, k, seed)
    return raw.to(DEVICE), dequantize(raw, qtype, k)


def _assert_within_bound(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    """|got - x @ w.T| (x [M, K]) within the module docstring's bound for got's path (GEMV or GEMM) and dtype."""
    x64, w64 = x.double().cpu(), w.double()
    exact = x64 @ w64.T
    spread = x64.abs() @ w64.abs().T
    m, k = x.shape
    before_cast = k * 2.0**-24 * spread  # the fp32 sum's distance from the exact product
    if m > tbq.GEMV_MAX_M and x.dtype != torch.float32:  # the GEMM rounds the decoded weights to x's dtype
        before_cast += UNIT[x.dtype] * spread
        if x.dtype == torch.float16:
            before_cast += 2.0**-25 * x64.abs().sum(-1, keepdim=True)
    bound = before_cast + UNIT[x.dtype] * (exact.abs() + before_cast)  # then one rounding to x's dtype
    if x.dtype == torch.float16:
        bound += 2.0**-25  # an output below fp16's normal range rounds to a step of 2^-24
    err = (got.double().cpu() - exact).abs()
    assert got.dtype == x.dtype
    assert (err <= bound).all(), f"worst error {err.max():.3g}, worst error / bound {(err / bound).max():.3g}"


@pytest.mark.parametrize("qtype", tbq.SUPPORTED_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 5, 20, 64])  # GEMV, GEMV, GEMM with a partial row tile, GEMM
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matmul_matches_the_dequantized_product(qtype, m, dtype):
    n, k = _shape(qtype)
    raw, w = _weight(qtype, n, k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype).to(DEVICE)
    got = tbq.block_quant_matmul(x, raw, qtype)
    assert got.shape == (m, n)
    _assert_within_bound(got, x, w)


@pytest.mark.parametrize("m", [3, 24])
def test_matmul_takes_leading_dims_strided_x_and_a_row_slice_of_raw(m):
    """x [2, m, K] sliced from a wider tensor; raw a row range of a bigger weight (rows keep their stride)."""
    qtype = GGMLType.Q4_1
    raw, w = _weight(qtype, 70, 128, seed=3)
    wide = torch.randn(2, m, 160, generator=torch.Generator().manual_seed(4)).to(DEVICE)
    x = wide[..., 16:144]
    got = tbq.block_quant_matmul(x, raw[10:60], qtype)
    assert got.shape == (2, m, 50)
    _assert_within_bound(got.reshape(-1, 50), x.reshape(-1, 128), w[10:60])


@pytest.mark.parametrize("qtype", tbq.SUPPORTED_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rows_equal_the_reference_bitwise(qtype, dtype):
    n, k = 40, 288 if qtype.block_size == 32 else 512  # 288: a partial 256-column tile
    raw, w = _weight(qtype, n, k, seed=1)
    ids = torch.tensor([[3, 0, 39], [3, 17, 22]], device=DEVICE)  # repeats, first and last rows, 6 ids: a partial tile
    got = tbq.block_quant_rows(raw, ids, qtype, dtype)
    assert got.dtype == dtype and got.shape == (2, 3, k)
    assert torch.equal(got.cpu(), w[ids.cpu()].to(dtype))


def test_an_id_out_of_range_reads_a_zero_row():
    raw, w = _weight(GGMLType.Q8_0, 8, 64)
    got = tbq.block_quant_rows(raw, torch.tensor([1, 8, -1], device=DEVICE), GGMLType.Q8_0)
    assert torch.equal(got[0].cpu(), w[1]) and not got[1:].any()


def test_empty_inputs():
    raw, _ = _weight(GGMLType.Q4_0, 8, 64)
    assert tbq.block_quant_matmul(torch.zeros(0, 64, device=DEVICE), raw, GGMLType.Q4_0).shape == (0, 8)
    assert tbq.block_quant_rows(raw, torch.zeros(0, dtype=torch.long, device=DEVICE), GGMLType.Q4_0).shape == (0, 64)


def test_bad_inputs_are_value_errors_naming_the_argument():
    raw, _ = _weight(GGMLType.Q4_0, 8, 64)
    x = torch.zeros(2, 64, device=DEVICE)
    with pytest.raises(ValueError, match="qtype: the Triton block-quant kernels read Q8_0, Q4_0"):
        tbq.block_quant_matmul(x, raw, GGMLType.F16)
    with pytest.raises(ValueError, match="raw: expected a uint8"):
        tbq.block_quant_matmul(x, raw.view(torch.int8), GGMLType.Q4_0)
    with pytest.raises(ValueError, match="raw: 35 bytes per row is not a whole number of Q4_0 blocks"):
        tbq.block_quant_matmul(x, raw[:, :35], GGMLType.Q4_0)
    with pytest.raises(ValueError, match="x: last dim 32 != the weight's 64 columns"):
        tbq.block_quant_matmul(x[:, :32], raw, GGMLType.Q4_0)
    with pytest.raises(ValueError, match="ids: expected int32 or int64"):
        tbq.block_quant_rows(raw, torch.zeros(2, device=DEVICE), GGMLType.Q4_0)


@pytest.mark.parametrize("qtype", [GGMLType.Q4_1, GGMLType.Q6_K], ids=lambda t: t.name)
@pytest.mark.parametrize("m", [2, 12])
def test_layers_triton_paths_equal_their_cpu_paths(qtype, m):
    """BlockQuantLinear.forward_triton / BlockQuantEmbedding.lookup_triton, what CUDA tensors run: the bias, the
    leading dims and the tied head's shared bytes, against the same layers' CPU paths."""
    from sprig.runtime.model.block_quant import BlockQuantEmbedding, BlockQuantLinear

    k = 256
    layer = BlockQuantLinear(k, 24, qtype, True, torch.float32)
    layer.load_raw(0, random_rows(qtype, 24, k, seed=5))
    layer.bias.data.copy_(torch.randn(24, generator=torch.Generator().manual_seed(6)))
    x = torch.randn(1, m, k, generator=torch.Generator().manual_seed(m))
    w = dequantize(layer.weight.data, qtype, k)
    got, cpu = layer.forward_triton(x.to(DEVICE)).cpu(), layer(x)  # no pack_for_cpu: the torch path
    # two fp32 sums of K products (gamma_K each) and the bias add's rounding on each side
    bound = 2 * k * 2.0**-24 * (x.abs() @ w.abs().T) + 2.0**-23 * cpu.abs()
    assert got.shape == (1, m, 24) and ((got - cpu).abs() <= bound).all()

    emb = BlockQuantEmbedding(40, k, qtype, torch.float16)
    emb.load_raw(0, random_rows(qtype, 40, k, seed=7))
    ids = torch.tensor([[5, 39, 0], [5, 1, 2]])
    assert torch.equal(emb.lookup_triton(ids.to(DEVICE)).cpu(), emb(ids))
    head = emb.tied_head()
    table = dequantize(emb.weight.data, qtype, k)
    xh = x.half().to(DEVICE)
    _assert_within_bound(head.forward_triton(xh).reshape(m, 40), xh.reshape(m, k), table)


@pytest.mark.parametrize("qtype", tbq.SUPPORTED_TYPES, ids=lambda t: t.name)
def test_the_torch_reference_runs_on_the_weights_device(qtype):
    """ggml_quants.dequantize keeps every tensor on the weight's device (CUDA without triton takes that path):
    the meta device stands in for CUDA here, since a CPU constant mixed into the shifts fails the same way."""
    raw = torch.zeros(2, qtype.row_bytes(256), dtype=torch.uint8, device="meta")
    assert dequantize(raw, qtype, 256).device.type == "meta"


def test_gpu_check_block_quant_cases_pass_shrunk_on_this_device(monkeypatch):
    """benchmarks/gpu_check.py's block-quant step (what a lent GPU runs) builds and passes its own checks here,
    every size but K divided by 192, so a broken case is found before a GPU is spent on it."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    assert spec is not None and spec.loader is not None
    gpu_check = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", gpu_check)  # dataclasses look their module up there
    spec.loader.exec_module(gpu_check)
    monkeypatch.setattr(gpu_check, "DEVICE", DEVICE)
    monkeypatch.setattr(gpu_check, "SHRINK", 192)
    names = set()
    for build in gpu_check.block_quant_builders(torch.float16):
        for case in build():
            assert case.check() <= gpu_check.TOL[torch.float16], (case.name, case.shape)
            names.add(case.name)
    assert {f"bq_matmul {t.name}" for t in tbq.SUPPORTED_TYPES} | {"bq_rows Q8_0"} == names
