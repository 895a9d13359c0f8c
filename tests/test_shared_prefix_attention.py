"""Decode rows sharing prefix pages are attended as (shared prefix once per group) ⊕ (own pages): same result."""

from __future__ import annotations

import pytest
import torch

from sprig.kernels import attention as A


def build_case(page_size: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(0)
    heads, group, dim = 2, 4, 32
    k_cache = torch.randn(300 * page_size, heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(300 * page_size, heads, dim, generator=gen).to(dtype)
    shared_a = torch.arange(10, 10 + -(-96 // page_size))
    shared_b = torch.arange(100, 100 + -(-130 // page_size))
    tables, lens = [], []
    for i in range(9):
        own = torch.arange(200 + 10 * i, 203 + 10 * i)
        head = shared_a if i < 4 else shared_b if i < 7 else torch.tensor([290 + i])
        tables.append(torch.cat([head, own]))
        lens.append(len(tables[-1]) * page_size - i % page_size)
    meta = A.AttentionMetadata.build(page_size, [1] * 9, [n - 1 for n in lens], tables)
    q = torch.randn(9, heads * group, dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, meta


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_decode_equals_plain_decode(page_size, dtype):
    q, k_cache, v_cache, meta = build_case(page_size, dtype)
    assert meta.decode_split is not None and len(meta.decode_split.groups) == 2
    plain = A.AttentionMetadata(page_size, meta.decode_rows, meta.decode_pages, meta.decode_mask, meta.extends)
    kv = q[:, :2]
    got = A.paged_attention(q, kv, kv, k_cache, v_cache, meta, 0.18).float()
    ref = A.paged_attention(q.float(), kv.float(), kv.float(), k_cache.float(), v_cache.float(), plain, 0.18)
    assert (got - ref).abs().max().item() < (1e-5 if dtype == torch.float32 else 2e-2)


def test_short_common_prefixes_are_not_split():
    tables = [torch.tensor([1, 2, 7]), torch.tensor([1, 2, 8])]  # 2 shared pages of 16 = 32 tokens < 64
    meta = A.AttentionMetadata.build(16, [1, 1], [40, 40], tables)
    assert meta.decode_split is None
