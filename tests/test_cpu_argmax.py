"""Greedy picks through the C argmax (kernels/csrc/argmax.c) equal torch.argmax, ties and NaNs included."""

from __future__ import annotations

import pytest
import torch

from sprig.kernels import cpu_native
from sprig.kernels.cpu_argmax import argmax_rows


def _awkward_rows(dtype: torch.dtype, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(9, vocab, generator=g).to(dtype)
    x[1] = 3.0  # all tied: the lowest index
    x[2, vocab - 1] = 50.0  # the maximum in the tail past the last whole vector
    x[3, 5] = x[3, vocab // 2] = float("nan")  # the first NaN, as torch
    x[4] = float("-inf")  # every token banned
    x[5, 7] = x[5, vocab - 2] = 60.0  # tied maxima far apart
    x[6, 0] = float("inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [15, 16, 17, 1000, 32000])
def test_matches_torch_argmax(dtype, vocab):
    x = _awkward_rows(dtype, vocab)
    assert torch.equal(argmax_rows(x), x.argmax(dim=-1))


def test_strided_rows_and_other_dtypes():
    x = _awkward_rows(torch.float32, 300)
    wide = torch.zeros(9, 512)
    wide[:, :300] = x
    view = wide[:, :300]  # rows 512 elements apart
    assert torch.equal(argmax_rows(view), x.argmax(dim=-1))
    half = x.half()  # no C path: torch's answer
    assert torch.equal(argmax_rows(half), half.argmax(dim=-1))
    assert argmax_rows(torch.zeros(0, 10)).shape == (0,)
    assert argmax_rows(torch.ones(3, 1, dtype=torch.bfloat16)).tolist() == [0, 0, 0]


def test_the_portable_path_matches_too():
    flags = tuple(f for f in cpu_native.FLAGS if f != "-march=native") + ("-mno-avx512f",)
    lib = cpu_native.load_library(flags)
    for dtype in (torch.float32, torch.bfloat16):
        x = _awkward_rows(dtype, 1000)
        out = torch.empty(x.shape[0], dtype=torch.int64)
        code = 0 if dtype == torch.float32 else 1
        assert lib.argmax_rows(x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), code, out.data_ptr(), 2) == 0
        assert torch.equal(out, x.argmax(dim=-1))
