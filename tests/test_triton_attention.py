"""Triton paged attention and KV store vs the torch reference (interpreter on CPU, compiled on CUDA)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the Triton kernels
pytest.importorskip(
    "triton", reason="triton is not installed (pip install 'sprig[gpu]')", exc_type=ImportError
)

from sprig.kernels import attention as ref  # noqa: E402
from sprig.kernels import triton_attention as tri  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}
pytestmark = pytest.mark.timeout(120)


def _scenario(dtype, n_q_heads, n_kv_heads, head_dim, page_size, ext_lens, prefix_lens, seed=0):
    """A shuffled page pool holding each sequence's prefix plus this step's k/v, and its metadata."""
    gen = torch.Generator().manual_seed(seed)
    pages_per_seq = [-(-(e + p) // page_size) for e, p in zip(ext_lens, prefix_lens, strict=True)]
    n_pages = sum(pages_per_seq) + 2  # spare pages hold garbage that must never be read
    perm = torch.randperm(n_pages, generator=gen)
    tables = list(torch.split(perm[: sum(pages_per_seq)], pages_per_seq))

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    k_cache, v_cache = (
        rand(n_pages * page_size, n_kv_heads, head_dim),
        rand(n_pages * page_size, n_kv_heads, head_dim),
    )
    n_tokens = sum(ext_lens)
    q, k, v = (
        rand(n_tokens, n_q_heads, head_dim),
        rand(n_tokens, n_kv_heads, head_dim),
        rand(n_tokens, n_kv_heads, head_dim),
    )
    slots = torch.cat([
        t[pos // page_size] * page_size + pos % page_size
        for t, pos in ((t, torch.arange(p, p + e)) for t, e, p in zip(tables, ext_lens, prefix_lens, strict=True))
    ])  # fmt: skip
    meta = ref.AttentionMetadata.build(page_size, ext_lens, prefix_lens, tables)
    return [x.to(DEVICE) for x in (q, k, v, k_cache, v_cache, slots)], _meta_to(meta, DEVICE)


def _meta_to(meta: ref.AttentionMetadata, device: str) -> ref.AttentionMetadata:
    """The same metadata with its tensors on `device`."""

    def mv(t):
        return None if t is None else t.to(device)

    extends = tuple(
        ref.ExtendSeq(s.token_start, s.extend_len, s.prefix_len, s.pages.to(device), mv(s.mask))
        for s in meta.extends
    )
    return ref.AttentionMetadata(
        meta.page_size, mv(meta.decode_rows), mv(meta.decode_pages), mv(meta.decode_mask), extends
    )


def _check(dtype, n_q_heads, n_kv_heads, head_dim, page_size, ext_lens, prefix_lens, **options):
    (q, k, v, k_cache, v_cache, slots), meta = _scenario(
        dtype, n_q_heads, n_kv_heads, head_dim, page_size, ext_lens, prefix_lens
    )
    ref.store_kv(k_cache, v_cache, slots, k, v)
    expected = ref.paged_attention(q, k, v, k_cache, v_cache, meta, head_dim**-0.5, **options)
    got = tri.paged_attention(q, k, v, k_cache, v_cache, meta, head_dim**-0.5, **options)
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), expected.float(), atol=tol, rtol=tol)


@pytest.fixture
def many_splits(monkeypatch):
    """Split decode contexts every 64 tokens so short test contexts exercise the split merge."""
    monkeypatch.setattr(tri, "_DECODE_MIN_SPLIT", 16)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 16])
def test_store_kv_matches_reference(dtype, page_size):
    (q, k, v, k_cache, v_cache, slots), _ = _scenario(dtype, 4, 2, 64, page_size, [3, 1, 9], [0, 20, 5])
    k_cache2, v_cache2 = k_cache.clone(), v_cache.clone()
    kv = torch.cat([k, v], dim=1)  # strided views, as the model's qkv split gives
    k_view, v_view = kv[:, :2], kv[:, 2:]
    ref.store_kv(k_cache, v_cache, slots, k, v)
    tri.store_kv(k_cache2, v_cache2, slots, k_view, v_view)
    assert torch.equal(k_cache, k_cache2) and torch.equal(v_cache, v_cache2)


# (GQA group, head dim, page size): every value of each factor, without the full product (the interpreter is slow).
SHAPES = [(1, 64, 1), (1, 128, 16), (4, 128, 1), (4, 64, 16), (8, 64, 1), (8, 128, 16)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("group", "head_dim", "page_size"), SHAPES)
def test_decode_ragged_batch(dtype, group, head_dim, page_size, many_splits):
    # Contexts of 1, 38, 17 and 150 tokens: one page, tails, and several decode splits.
    _check(dtype, 2 * group, 2, head_dim, page_size, [1, 1, 1, 1], [0, 37, 16, 149])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("group", "head_dim", "page_size"), SHAPES)
def test_extend_with_and_without_prefix(dtype, group, head_dim, page_size):
    # Prefixes of 0, 13 (< a block) and 77 (not a block multiple); 70 new tokens spans two query blocks.
    _check(dtype, group, 1, head_dim, page_size, [5, 70, 2], [0, 13, 77])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("page_size", [1, 16])
def test_mixed_decode_and_extend_batch(dtype, page_size, many_splits):
    _check(dtype, 8, 2, 64, page_size, [1, 7, 1, 33, 1, 2], [200, 0, 3, 64, 0, 90])


@pytest.mark.parametrize("options", [{"softcap": 0.5}, {"window": 9}, {"softcap": 0.5, "window": 40}],
                         ids=["softcap", "window", "both"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_softcap_and_sliding_window_match_the_reference(options, page_size, many_splits):
    """Gemma's scores: decode rows and extends (with prefixes longer than the window, blocks past it) masked and
    capped as the torch reference does."""
    _check(torch.float32, 4, 2, 64, page_size, [1, 7, 1, 70, 1, 2], [200, 0, 3, 64, 0, 90], **options)


def test_long_decode_splits_are_merged(many_splits):
    (q, *_), meta = _scenario(torch.float32, 4, 1, 64, 16, [1, 1], [500, 20])
    splits, split_len = tri._decode_splits(meta.decode_pages.shape[1] * 16, 2)
    assert splits > 4 and split_len % tri._DECODE_BLOCK_N == 0
    _check(torch.float32, 4, 1, 64, 16, [1, 1], [500, 20])


def test_strided_qkv_views_and_plan_reuse():
    """q/k/v sliced from one fused projection; a second layer reuses the cached plan with new data."""
    (q, k, v, k_cache, v_cache, slots), meta = _scenario(torch.float32, 8, 2, 64, 16, [1, 6, 1], [30, 10, 0])
    for layer in range(2):
        qkv = torch.randn(q.shape[0], 12, 64, device=DEVICE) + layer
        q, k, v = qkv[:, :8], qkv[:, 8:10], qkv[:, 10:]
        ref.store_kv(k_cache, v_cache, slots, k, v)
        expected = ref.paged_attention(q, k, v, k_cache, v_cache, meta, 0.125)
        got = tri.paged_attention(q, k, v, k_cache, v_cache, meta, 0.125)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
    assert tri._plan_for(meta, q.device) is tri._plan_for(meta, q.device)


def test_decode_split_sizing():
    assert tri._decode_splits(64, 1) == (1, 64)
    splits, split_len = tri._decode_splits(100_000, 4)
    assert splits == tri._DECODE_MAX_SPLITS and splits * split_len >= 100_000
    assert tri._decode_splits(100_000, 10_000)[0] == 1  # a big batch fills the GPU without splitting


# --------------------------------------------------------------------------------------------- quantized KV cache

KV_DTYPES = [torch.int8, torch.float8_e4m3fn, torch.float8_e5m2]


def _quantized_pool(k_cache: torch.Tensor, kv_dtype: torch.dtype) -> list[torch.Tensor]:
    """Empty code caches and bf16 scale caches shaped like `k_cache`'s pool."""
    slots, hkv, d = k_cache.shape
    return [torch.zeros(slots, hkv, d, dtype=torch.uint8, device=DEVICE).view(kv_dtype) for _ in range(2)] + [
        torch.zeros(slots, hkv, dtype=torch.bfloat16, device=DEVICE) for _ in range(2)]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_quantized_store_writes_the_bytes_torch_writes(dtype, kv_dtype):
    (q, k, v, k_cache, _, slots), _ = _scenario(dtype, 4, 2, 64, 16, [3, 1, 9], [0, 20, 5])
    scale = torch.logspace(-3, 3, k.shape[0], device=DEVICE).view(-1, 1, 1).to(dtype)
    kv = torch.cat([k * scale, v], dim=1)  # strided views, magnitudes across the codes' whole range
    want, got = _quantized_pool(k_cache, kv_dtype), _quantized_pool(k_cache, kv_dtype)
    ref.store_kv(want[0], want[1], slots, kv[:, :2], kv[:, 2:], want[2], want[3])
    tri.store_kv(got[0], got[1], slots, kv[:, :2], kv[:, 2:], got[2], got[3])
    for a, b in zip(want, got, strict=True):
        assert torch.equal(_bytes(a), _bytes(b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_attention_over_codes_matches_the_reference(dtype, kv_dtype, many_splits):
    """Decode rows and extends (with and without a prefix) in one batch, reading int8 / fp8 codes."""
    (q, k, v, k_cache, _, slots), meta = _scenario(dtype, 8, 2, 64, 16, [1, 70, 1, 9], [150, 0, 3, 40])
    kc, vc, ks, vs = _quantized_pool(k_cache, kv_dtype)
    g = torch.Generator().manual_seed(1)
    for cache, scales in ((kc, ks), (vc, vs)):  # every slot holds codes, as a pool in use does
        ref.store_kv(cache, cache, torch.arange(len(cache), device=DEVICE),
                     torch.randn(*cache.shape, generator=g).to(dtype).to(DEVICE),
                     torch.randn(*cache.shape, generator=g).to(dtype).to(DEVICE), scales, scales)
    ref.store_kv(kc, vc, slots, k, v, ks, vs)
    expected = ref.paged_attention(q, k, v, kc, vc, meta, 0.125, k_scale=ks, v_scale=vs)
    got = tri.paged_attention(q, k, v, kc, vc, meta, 0.125, k_scale=ks, v_scale=vs)
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), expected.float(), atol=tol, rtol=tol)
