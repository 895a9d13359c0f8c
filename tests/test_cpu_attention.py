"""The C decode attention (kernels/csrc) reads the paged pool in place and matches the torch reference."""

from __future__ import annotations

import pytest
import torch

from sprig.kernels import attention as ref
from sprig.kernels import cpu_native
from sprig.kernels.cpu_native import amx_available, load_library, paged_decode_attention

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def vector_lib():
    return load_library()


@pytest.fixture(scope="module")
def generic_lib():
    """The same source built without AVX-512, so the portable C path is checked on this machine too."""
    flags = tuple(f for f in cpu_native.FLAGS if f != "-march=native") + ("-mno-avx512f",)
    return load_library(flags)


def _decode_case(seed: int, dtype: torch.dtype, lens: list[int], hq: int, hkv: int, d: int, page_size: int,
                 shared_pages: int = 0):
    g = torch.Generator().manual_seed(seed)
    n_pages = 4 + sum(-(-n // page_size) for n in lens)
    k_cache = torch.randn(n_pages * page_size, hkv, d, generator=g).to(dtype)
    v_cache = torch.randn(n_pages * page_size, hkv, d, generator=g).to(dtype)
    free = (torch.randperm(n_pages - 1, generator=g) + 1).tolist()  # page 0 is the pool's scratch page
    common = [free.pop() for _ in range(shared_pages)]
    tables = []
    for n in lens:
        own = -(-n // page_size) - len(common)
        tables.append(torch.tensor(common + [free.pop() for _ in range(own)], dtype=torch.int64))
    meta = ref.AttentionMetadata.build(page_size, [1] * len(lens), [n - 1 for n in lens], tables)
    q = torch.randn(len(lens), hq, d, generator=g).to(dtype)
    return q, k_cache, v_cache, meta


def _reference(q, k_cache, v_cache, meta, scale):
    plain = ref.AttentionMetadata(meta.page_size, meta.decode_rows, meta.decode_pages, meta.decode_mask, ())
    return ref.decode_attention(q.float(), k_cache.float(), v_cache.float(), plain, scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("hq", "hkv", "d"), [(4, 4, 64), (8, 2, 128), (16, 2, 64), (6, 2, 80)])
@pytest.mark.parametrize("page_size", [1, 16])
def test_matches_the_torch_reference(vector_lib, dtype, hq, hkv, d, page_size):
    lens = [1, 7, 16, 17, 64, 65, 130, 333]  # one key; inside, at and across page and 64-key chunk borders
    q, k_cache, v_cache, meta = _decode_case(0, dtype, lens, hq, hkv, d, page_size)
    scale = d**-0.5
    out = paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, page_size, scale,
                                 lib=vector_lib)
    assert out is not None and out.dtype == dtype and out.shape == q.shape
    torch.testing.assert_close(out.float(), _reference(q, k_cache, v_cache, meta, scale), atol=TOL[dtype],
                               rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_portable_path_matches_too(generic_lib, dtype):
    q, k_cache, v_cache, meta = _decode_case(1, dtype, [1, 15, 40, 200], 8, 2, 64, 16)
    out = paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, 16, 0.125,
                                 lib=generic_lib)
    torch.testing.assert_close(out.float(), _reference(q, k_cache, v_cache, meta, 0.125), atol=TOL[dtype],
                               rtol=TOL[dtype])


def test_rows_sharing_prefix_pages_read_them_in_place(vector_lib):
    """Rows whose tables start with the same pages (a radix-cache prefix) give what the split torch path gives."""
    q, k_cache, v_cache, meta = _decode_case(2, torch.float32, [100, 120, 97, 150], 8, 2, 64, 16, shared_pages=5)
    assert meta.decode_split is not None
    split = ref.decode_attention(q, k_cache, v_cache, meta, 0.125)
    out = paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, 16, 0.125,
                                 lib=vector_lib)
    torch.testing.assert_close(out, split, atol=2e-5, rtol=2e-5)


def test_large_scores_do_not_overflow(vector_lib):
    q, k_cache, v_cache, meta = _decode_case(3, torch.float32, [50, 300], 4, 4, 64, 16)
    q *= 40.0  # scores in the hundreds: the running maximum keeps every exponential finite
    out = paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, 16, 0.125,
                                 lib=vector_lib)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _reference(q, k_cache, v_cache, meta, 0.125), atol=1e-4, rtol=1e-4)


def test_what_the_kernel_cannot_take_falls_back_to_torch(vector_lib):
    q, k_cache, v_cache, meta = _decode_case(4, torch.float32, [20], 64, 1, 64, 16)  # 64 query heads per kv head
    assert paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, 16, 0.125,
                                  lib=vector_lib) is None
    out = cpu_native.decode_attention(q, k_cache, v_cache, meta, 0.125)
    torch.testing.assert_close(out, _reference(q, k_cache, v_cache, meta, 0.125), atol=2e-5, rtol=2e-5)
    assert paged_decode_attention(q.double(), k_cache.double(), v_cache.double(), meta.decode_pages,
                                  meta.decode_lens, 16, 0.125, lib=vector_lib) is None


def test_a_mixed_batch_through_the_cpu_backend_equals_the_torch_backend():
    """Decode rows go through C, prefill and extend rows through torch, in one flat batch."""
    g = torch.Generator().manual_seed(5)
    page_size, hq, hkv, d = 16, 8, 2, 64
    k_cache = torch.randn(40 * page_size, hkv, d, generator=g)
    v_cache = torch.randn(40 * page_size, hkv, d, generator=g)
    extend_lens, prefix_lens = [1, 9, 1, 30], [40, 0, 77, 20]
    tables = [torch.arange(1 + 8 * i, 9 + 8 * i) for i in range(4)]
    meta = ref.AttentionMetadata.build(page_size, extend_lens, prefix_lens, tables)
    t = sum(extend_lens)
    q, k, v = (torch.randn(t, h, d, generator=g) for h in (hq, hkv, hkv))
    expected = ref.paged_attention(q, k, v, k_cache, v_cache, meta, 0.125)
    got = cpu_native.paged_attention(q, k, v, k_cache, v_cache, meta, 0.125)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


def _grouped_case(seed: int, hq: int, hkv: int, d: int, page_size: int):
    """Three groups of rows sharing 2, 7 and 20 rows' worth of leading pages, plus two rows of their own."""
    g = torch.Generator().manual_seed(seed)
    n_pages = 700
    k_cache = torch.randn(n_pages * page_size, hkv, d, generator=g).to(torch.bfloat16)
    v_cache = torch.randn(n_pages * page_size, hkv, d, generator=g).to(torch.bfloat16)
    free = (torch.randperm(n_pages - 1, generator=g) + 1).tolist()
    tables, lens = [], []
    for rows, shared_tokens in ((2, 64), (7, 300), (20, 136)):  # chunk borders: 128 keys; tile borders: 16, 32
        common = [free.pop() for _ in range(-(-shared_tokens // page_size))]
        for r in range(rows):
            n = len(common) * page_size + 1 + (13 * r) % 70
            tables.append(torch.tensor(common + [free.pop() for _ in range(-(-n // page_size) - len(common))]))
            lens.append(n)
    for n in (5, 90):
        tables.append(torch.tensor([free.pop() for _ in range(-(-n // page_size))]))
        lens.append(n)
    meta = ref.AttentionMetadata.build(page_size, [1] * len(lens), [n - 1 for n in lens], tables)
    q = torch.randn(len(lens), hq, d, generator=g).to(torch.bfloat16)
    return q, k_cache, v_cache, meta


needs_amx = pytest.mark.skipif(not amx_available(), reason="the shared-prefix kernel runs on AMX tiles")
GQA = [(12, 4, 64), (8, 2, 128), (4, 4, 64), (16, 1, 64)]  # 3, 4, 1 and 16 query heads per kv head


@needs_amx
@pytest.mark.parametrize(("hq", "hkv", "d"), GQA)
@pytest.mark.parametrize("page_size", [4, 16, 32])
def test_each_groups_shared_prefix_is_one_matrix_product(vector_lib, hq, hkv, d, page_size):
    """The AMX kernel's output and log-sum-exp over a group's shared keys equal a torch softmax over them."""
    q, k_cache, v_cache, meta = _grouped_case(6, hq, hkv, d, page_size)
    split = meta.decode_split
    assert split is not None and sorted(len(g.rows) for g in split.groups) == [2, 7, 20]
    b = q.shape[0]
    out = torch.full((b, hq, d), float("nan"))
    lse = torch.full((b, hq), float("nan"))
    status = vector_lib.attend_prefix_groups(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), meta.decode_pages.data_ptr(), meta.decode_pages.shape[1],
        split.rows.data_ptr(), split.offsets.data_ptr(), split.shared_pages.data_ptr(), len(split.groups), hq, hkv,
        d, page_size, d**-0.5, out.data_ptr(), lse.data_ptr(), 2)
    assert status == 0
    for group in split.groups:
        keys = ref._gather_pages(k_cache, group.pages, page_size).float().repeat_interleave(hq // hkv, 1)
        values = ref._gather_pages(v_cache, group.pages, page_size).float().repeat_interleave(hq // hkv, 1)
        scores = torch.einsum("bhd,thd->bht", q[group.rows].float(), keys) * d**-0.5
        want = torch.einsum("bht,thd->bhd", scores.softmax(-1), values)
        torch.testing.assert_close(out[group.rows], want, atol=1.6e-2, rtol=1.6e-2)
        torch.testing.assert_close(lse[group.rows], scores.logsumexp(-1), atol=1e-3, rtol=1e-3)
    assert lse[-2:].isnan().all()  # rows in no group are left alone


@needs_amx
@pytest.mark.parametrize(("hq", "hkv", "d"), GQA)
@pytest.mark.parametrize("page_size", [4, 16])
def test_groups_merged_with_each_rows_own_pages_match_the_reference(vector_lib, hq, hkv, d, page_size):
    q, k_cache, v_cache, meta = _grouped_case(7, hq, hkv, d, page_size)
    out = paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, page_size, d**-0.5,
                                 lib=vector_lib, split=meta.decode_split)
    torch.testing.assert_close(out.float(), _reference(q, k_cache, v_cache, meta, d**-0.5), atol=TOL[torch.bfloat16],
                               rtol=TOL[torch.bfloat16])


@pytest.mark.parametrize("page_size", [4, 16])
def test_the_kernel_finds_the_groups_the_metadata_would(vector_lib, page_size):
    """Callers that pass no groups (the CPU backend, a CPU graph) get them found in C by the same rule."""
    _, _, _, meta = _grouped_case(6, 8, 2, 64, page_size)
    pages, lens, b = meta.decode_pages, meta.decode_lens, meta.decode_pages.shape[0]
    rows, offsets, shared = (torch.zeros(n, dtype=torch.int64) for n in (b, b + 1, b))
    scratch = torch.zeros(b, dtype=torch.int8)
    n = vector_lib.find_groups(pages.data_ptr(), lens.data_ptr(), b, pages.shape[1], page_size, rows.data_ptr(),
                               offsets.data_ptr(), shared.data_ptr(), scratch.data_ptr())
    found = {(frozenset(rows[offsets[g]:offsets[g + 1]].tolist()), int(shared[g])) for g in range(n)}
    split = meta.decode_split
    assert split is not None
    assert found == {(frozenset(g.rows.tolist()), len(g.pages)) for g in split.groups}


@pytest.mark.parametrize(("hq", "hkv", "d"), GQA)
@pytest.mark.parametrize("page_size", [4, 16])
def test_groups_found_by_the_kernel_match_the_reference(vector_lib, hq, hkv, d, page_size):
    """bf16 rows sharing leading pages, no groups given: with AVX512_BF16 the kernel attends each group's shared
    keys once for all its rows on vector units and merges them with each row's own (else every row reads all its
    pages); either way the reference's result, to bf16 rounding."""
    q, k_cache, v_cache, meta = _grouped_case(9, hq, hkv, d, page_size)
    out = paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, page_size, d**-0.5,
                                 lib=vector_lib)
    torch.testing.assert_close(out.float(), _reference(q, k_cache, v_cache, meta, d**-0.5), atol=TOL[torch.bfloat16],
                               rtol=TOL[torch.bfloat16])


def test_groups_are_ignored_where_the_kernel_has_no_group_path(vector_lib):
    """fp32 (no AMX product) reads every row's pages itself: the same result as without groups."""
    q, k_cache, v_cache, meta = _grouped_case(8, 8, 2, 64, 16)
    q, k_cache, v_cache = q.float(), k_cache.float(), v_cache.float()
    out = paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, 16, 0.125,
                                 lib=vector_lib, split=meta.decode_split)
    torch.testing.assert_close(out, _reference(q, k_cache, v_cache, meta, 0.125), atol=2e-5, rtol=2e-5)


def _extend_case(seed: int, hq: int, hkv: int, d: int, page_size: int):
    """Prefills and extends after cached prefixes (lengths across 16/32-key tiles and 128-key chunks) with two
    decode rows, in one flat bf16 batch whose new keys and values are already in the pool."""
    g = torch.Generator().manual_seed(seed)
    k_cache = torch.randn(900 * page_size, hkv, d, generator=g).to(torch.bfloat16)
    v_cache = torch.randn(900 * page_size, hkv, d, generator=g).to(torch.bfloat16)
    ext, pre = [2, 1, 37, 300, 5, 1, 129], [0, 50, 0, 33, 700, 90, 128]
    free = (torch.randperm(899, generator=g) + 1).tolist()
    tables = [torch.tensor([free.pop() for _ in range(-(-(e + p) // page_size))]) for e, p in zip(ext, pre, strict=True)]
    meta = ref.AttentionMetadata.build(page_size, ext, pre, tables)
    qkv = torch.randn(sum(ext), hq + 2 * hkv, d, generator=g).to(torch.bfloat16)
    q, k, v = qkv.split([hq, hkv, hkv], 1)  # row-strided views, as the model passes them
    slots = torch.tensor([int(t[i // page_size]) * page_size + i % page_size
                          for e, p, t in zip(ext, pre, tables, strict=True) for i in range(p, p + e)])
    k_cache.index_copy_(0, slots, k)
    v_cache.index_copy_(0, slots, v)
    return q, k, v, k_cache, v_cache, meta


needs_extend_kernel = pytest.mark.skipif(
    not amx_available() and not cpu_native.vec_attention_available(),
    reason="the extend kernel runs on AMX tiles or AVX512_BF16")


@needs_extend_kernel
@pytest.mark.parametrize("amx", ["1", "0"], ids=["amx-if-present", "vector"])
@pytest.mark.parametrize(("hq", "hkv", "d"), GQA)
@pytest.mark.parametrize("page_size", [4, 16])
def test_prefill_and_extend_in_c_match_the_reference(monkeypatch, amx, hq, hkv, d, page_size):
    """Causal attention of new tokens over their cached and new keys, read in place from the pool: on AMX tiles
    where the CPU has them, else (and with SPRIG_AMX=0) on vector units."""
    monkeypatch.setenv("SPRIG_AMX", amx)
    q, k, v, k_cache, v_cache, meta = _extend_case(9, hq, hkv, d, page_size)
    scale = d**-0.5
    out = torch.full(q.shape, float("nan"), dtype=q.dtype)
    assert cpu_native.extend_attention_native(q, k_cache, v_cache, meta, scale, out)
    want = ref.paged_attention(q.float(), k.float(), v.float(), k_cache.float(), v_cache.float(), meta, scale)
    rows = torch.cat([torch.arange(s.token_start, s.token_start + s.extend_len) for s in meta.extends])
    torch.testing.assert_close(out[rows].float(), want[rows], atol=TOL[torch.bfloat16], rtol=TOL[torch.bfloat16])
    got = cpu_native.paged_attention(q, k, v, k_cache, v_cache, meta, scale)  # decode rows in C too
    torch.testing.assert_close(got.float(), want, atol=TOL[torch.bfloat16], rtol=TOL[torch.bfloat16])


def test_extends_stay_in_torch_in_fp32_or_without_a_kernel(monkeypatch, generic_lib):
    q, k, v, k_cache, v_cache, meta = _extend_case(10, 8, 2, 64, 16)
    out = torch.empty(q.shape, dtype=q.dtype)
    assert not cpu_native.extend_attention_native(q.float(), k_cache.float(), v_cache.float(), meta, 0.125,
                                                  out.float())
    monkeypatch.setenv("SPRIG_AMX", "0")
    assert not cpu_native.extend_attention_native(q, k_cache, v_cache, meta, 0.125, out, lib=generic_lib)
    want = ref.paged_attention(q.float(), k.float(), v.float(), k_cache.float(), v_cache.float(), meta, 0.125)
    got = cpu_native.paged_attention(q, k, v, k_cache, v_cache, meta, 0.125)
    torch.testing.assert_close(got.float(), want, atol=TOL[torch.bfloat16], rtol=TOL[torch.bfloat16])


def test_the_kernels_leave_the_callers_denormals_alone(vector_lib):
    """The kernels flush denormals to zero inside their own threads (an exp of a masked score is one) and restore
    the floating-point mode before returning: the caller's arithmetic still produces denormals."""
    q, k_cache, v_cache, meta = _decode_case(11, torch.bfloat16, [30, 200], 8, 2, 64, 16)
    paged_decode_attention(q, k_cache, v_cache, meta.decode_pages, meta.decode_lens, 16, 0.125, lib=vector_lib)
    if amx_available() or cpu_native.vec_attention_available():
        q, k, v, k_cache, v_cache, meta = _extend_case(12, 8, 2, 64, 16)
        assert cpu_native.extend_attention_native(q, k_cache, v_cache, meta, 0.125,
                                                  torch.empty(q.shape, dtype=q.dtype))
    tiny = torch.tensor([1e-30], dtype=torch.float32) * torch.tensor([1e-10], dtype=torch.float32)
    assert tiny.item() > 0.0  # 1e-40 is denormal: with flush-to-zero left on it would be 0
