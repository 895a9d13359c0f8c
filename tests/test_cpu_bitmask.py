"""The sampler's grammar mask (`kernels.bitmask.mask_logits_`): the C pass (kernels/csrc/bitmask.c) gives the
torch reference's logits and dead rows exactly, including NaNs, infinities, partial words and short masks."""

from __future__ import annotations

import pytest
import torch

from sprig.kernels import bitmask as bm
from sprig.kernels.cpu_native import native_kernels


def _awkward(vocab: int, words: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(8, vocab, generator=g)
    mask = torch.randint(-(2**31), 2**31 - 1, (8, words), generator=g, dtype=torch.int32)
    x[1, 3] = float("inf")
    mask[1, 0] &= ~(1 << 3)  # +inf under a cleared bit: -inf, not NaN
    x[2, :] = float("nan")  # NaNs become -inf: a dead row
    x[3, 5] = float("-inf")
    mask[4] = 0  # nothing allowed: dead
    mask[5] = -1  # everything the mask covers allowed
    x[6] = float("-inf")  # banned before the mask: dead whatever the mask says
    return x, mask


def _reference(x: torch.Tensor, mask: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, torch.Tensor]:
    with monkeypatch.context() as m:
        m.setattr("sprig.kernels.cpu_native.native_kernels", lambda: None)
        dead = bm.mask_logits_(x, mask)
    return x, dead


@pytest.mark.parametrize("vocab,words", [(31, 1), (32, 1), (33, 2), (100, 4), (4096, 128), (100, 2)])
def test_c_pass_matches_the_torch_reference(vocab, words, monkeypatch):
    if native_kernels() is None:
        pytest.skip("sprig's C kernels are off or could not be built")
    x, mask = _awkward(vocab, words)
    want, want_dead = _reference(x.clone(), mask, monkeypatch)
    got = x.clone()
    dead = bm.mask_logits_(got, mask)
    assert torch.equal(got, want)
    assert torch.equal(dead, want_dead)
    assert dead[[2, 4, 6]].all() and not dead[[0, 5]].any()
    if words * 32 < vocab:  # ids past the mask are banned
        assert (got[:, words * 32:] == float("-inf")).all()


def test_reference_keeps_minus_infinity_and_finds_dead_rows(monkeypatch):
    x, mask = _awkward(100, 4)
    out, dead = _reference(x, mask, monkeypatch)
    assert not out.isnan().any()
    assert out[3, 5] == float("-inf") and out[1, 3] == float("-inf")  # never -FLT_MAX, which would look alive
    assert dead.tolist() == [False, False, True, False, True, False, True, False]


def test_strided_logits_and_bad_masks():
    x, mask = _awkward(300, 10)
    wide = torch.zeros(8, 512)
    wide[:, :300] = x
    view = wide[:, :300]
    want = x.clone()
    assert torch.equal(bm.mask_logits_(view, mask), bm.mask_logits_(want, mask))
    assert torch.equal(view, want)
    with pytest.raises(ValueError, match="int32"):
        bm.mask_logits_(x, mask.long())
    with pytest.raises(ValueError, match="int32"):
        bm.mask_logits_(x, mask[:3])
