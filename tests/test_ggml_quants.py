"""The torch reference of GGML's block formats (kernels/ggml_quants.py) against the `gguf` package, bit for bit.

Random blocks: every byte random (so every code, scale and packed 6-bit scale pattern occurs) except the float16
scales, drawn as finite values of a weight's size, since a NaN compares unequal to itself."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from sprig.kernels.ggml_quants import QUANTIZABLE, GGMLType, dequantize, ggml_type, pack_q4_g128, quantize

GGML_TYPES = [t for t in GGMLType if t.ggml]  # the gguf package knows these; Q4_G128 is sprig's own

# Byte offsets of each block's float16 fields.
F16_FIELDS = {GGMLType.Q4_0: (0,), GGMLType.Q4_1: (0, 2), GGMLType.Q5_0: (0,), GGMLType.Q8_0: (0,),
              GGMLType.Q4_K: (0, 2), GGMLType.Q5_K: (0, 2), GGMLType.Q6_K: (208,), GGMLType.Q4_G128: (0,)}


def random_rows(qtype: GGMLType, rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """uint8 [rows, row_bytes] of random `qtype` blocks with finite float16 scales."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (rows, qtype.row_bytes(cols)), dtype=torch.uint8, generator=g)
    blocks = raw.view(-1, qtype.type_size)
    for at in F16_FIELDS.get(qtype, ()):
        scale = (torch.rand(blocks.shape[0], generator=g) * 0.02 - 0.005).to(torch.float16)
        blocks[:, at : at + 2] = scale.view(torch.uint8).view(-1, 2)
    if qtype is GGMLType.F32:
        return torch.randn(rows, cols, generator=g).view(torch.uint8)
    if qtype in (GGMLType.F16, GGMLType.BF16):
        dtype = torch.float16 if qtype is GGMLType.F16 else torch.bfloat16
        return torch.randn(rows, cols, generator=g).to(dtype).view(torch.uint8)
    return raw


@pytest.mark.parametrize("qtype", GGML_TYPES, ids=lambda t: t.name)
def test_dequantize_matches_gguf_bitwise(qtype):
    rows, cols = 7, 512
    raw = random_rows(qtype, rows, cols)
    ours = dequantize(raw, qtype, cols)
    theirs = gguf.quants.dequantize(raw.numpy(), gguf.GGMLQuantizationType(int(qtype)))
    assert ours.dtype == torch.float32 and ours.shape == (rows, cols)
    assert np.array_equal(ours.numpy().view(np.uint32), np.asarray(theirs, dtype=np.float32).view(np.uint32))


@pytest.mark.parametrize("qtype", QUANTIZABLE, ids=lambda t: t.name)
def test_quantize_matches_gguf_bitwise(qtype):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(33, 256, generator=g) * 0.05
    w[0, :32] = 0  # an all-zero block: scale 0, no division by zero
    w[1, :32] = 0.25  # a constant block (Q4_1: max == min)
    w[2, 5] = -3.0  # an outlier
    ours = quantize(w, qtype)
    theirs = gguf.quants.quantize(w.numpy(), gguf.GGMLQuantizationType(int(qtype)))
    assert ours.dtype == torch.uint8 and torch.equal(ours, torch.from_numpy(theirs))
    assert (dequantize(ours, qtype, 256) - w).abs().max() < 0.2  # round trip within a code step of the outlier


def test_block_sizes_match_gguf():
    for qtype in GGML_TYPES:
        assert (qtype.block_size, qtype.type_size) == gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(qtype))]


def test_unsupported_types_and_shapes_are_one_line_errors():
    with pytest.raises(ValueError, match="GGML tensor type Q5_1 is not supported"):
        ggml_type(int(gguf.GGMLQuantizationType.Q5_1))
    with pytest.raises(ValueError, match="cannot quantize to Q4_K"):
        quantize(torch.zeros(2, 256), GGMLType.Q4_K)
    with pytest.raises(ValueError, match="multiples of 32"):
        quantize(torch.zeros(2, 48), GGMLType.Q8_0)
    with pytest.raises(ValueError, match=r"uint8 \[rows, 36\]"):
        dequantize(torch.zeros(2, 34, dtype=torch.uint8), GGMLType.Q4_0, 64)
    assert ggml_type(14) is GGMLType.Q6_K
    with pytest.raises(ValueError, match="GGML tensor type id 1000 is not supported"):
        ggml_type(int(GGMLType.Q4_G128))  # sprig's own format is never read from a GGUF file


def test_q4_g128_is_scale_times_code_minus_zero_exactly():
    """Every code 0..15, zeros 0..16 (GPTQ v1's zero of 16 included) and 255, scales of both signs: the decoded
    weight is exactly s * (q - z) computed in float64."""
    g = torch.Generator().manual_seed(3)
    rows, cols = 6, 512
    codes = torch.randint(0, 16, (rows, cols), generator=g)
    zeros = torch.randint(0, 17, (rows, cols // 128), generator=g)
    zeros[0, 0] = 255
    scales = (torch.rand(rows, cols // 128, generator=g) * 0.02 - 0.005).to(torch.float16)
    raw = pack_q4_g128(codes, zeros, scales)
    assert raw.shape == (rows, GGMLType.Q4_G128.row_bytes(cols)) == (rows, 4 * 68)
    exact = (codes.double() - zeros.double().repeat_interleave(128, 1)) * scales.double().repeat_interleave(128, 1)
    assert torch.equal(dequantize(raw, GGMLType.Q4_G128, cols).double(), exact)
    with pytest.raises(ValueError, match=r"float16 scales \[6, 4\]"):
        pack_q4_g128(codes, zeros, scales.float())
