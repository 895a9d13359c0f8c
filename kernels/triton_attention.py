"""Attention over a paged KV pool (Triton twin of `kernels/attention.py`).

Same layout and signatures as the torch reference: the pool of one layer is `k_cache`/`v_cache`
[num_pages * page_size, Hkv, D], token slot `s` lives in page `s // page_size`, and `AttentionMetadata` splits
the flat batch into decode rows and extend sequences.

- Decode (one new token per sequence) is flash-decoding: one program per (sequence, KV head, split of the
  context) attends all the query heads of its GQA group at once, writes a partial output and its log-sum-exp,
  and a second kernel merges the splits. Splitting keeps the GPU busy when batch * heads is small and contexts
  are long.
- Extend (prefill, or new tokens after a cached prefix) runs one program per (block of query rows of one
  sequence, query head): first full attention over the cached prefix read through the page table, then causal
  attention over the new tokens read straight from this step's k/v.

A quantized pool (`kernels/kv_quant.py`: int8 / fp8 codes, a bf16 scale per slot and kv head) is written and read
by the same kernels with a constexpr switch (KV_KIND 3 int8, 4 fp8 e4m3, 5 fp8 e5m2, 0 the model dtype). The codes
are made and widened with integer bit operations, the bytes torch and the C kernels write, so they need no fp8
support from Triton; fp8 pools are passed as uint8 views. With codes, the new tokens of an extend are read back
from the pool like the prefix (as the torch reference does).

What the kernels need beyond `AttentionMetadata`'s fields (sequence lengths, a padded page table for the
extends, a map from program to query block) is derived once per metadata object and reused by every layer.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from sprig.kernels.attention import AttentionMetadata
from sprig.kernels.kv_quant import KV_DTYPE_CODES, QMAX, is_quantized
from sprig.kernels.triton_kv_quant import load_kv, store_rows
from sprig.kernels.triton_utils import dot_precision

_DECODE_BLOCK_N = 64  # keys per decode tile
_DECODE_MIN_SPLIT = 256  # tokens: below this a split's fixed cost outweighs the parallelism it adds
_DECODE_MAX_SPLITS = 16
_DECODE_TARGET_PROGRAMS = 512  # enough programs to fill a large GPU (~4 per SM on 132 SMs)
_EXTEND_BLOCK_M = 64  # query rows per extend program
_MIN_DOT_ROWS = 16  # tl.dot needs at least 16 rows: small GQA groups are padded up to it
_LOG2E = 1.4426950408889634
_NO_WINDOW = 1 << 30  # the window a full-attention layer passes: longer than any sequence


# --------------------------------------------------------------------------------------------- kernels


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, kc_ptr, vc_ptr, ks_ptr, vs_ptr, slots_ptr,
    k_row_stride, k_head_stride, v_row_stride, v_head_stride,
    kc_slot_stride, kc_head_stride, vc_slot_stride, vc_head_stride, scale_slot_stride,
    n_heads, head_dim, QMAX: tl.constexpr, KV_KIND: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    tok = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots_ptr + tok).to(tl.int64)
    hs = tl.arange(0, BLOCK_H)
    h = hs[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    valid = (h < n_heads) & (d < head_dim)
    k = tl.load(k_ptr + tok * k_row_stride + h * k_head_stride + d, mask=valid, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + tok * v_row_stride + h * v_head_stride + d, mask=valid, other=0.0).to(tl.float32)
    scale_off = slot * scale_slot_stride + hs
    store_rows(k, kc_ptr + slot * kc_slot_stride + h * kc_head_stride + d, ks_ptr + scale_off, valid,
                hs < n_heads, QMAX, KV_KIND)
    store_rows(v, vc_ptr + slot * vc_slot_stride + h * vc_head_stride + d, vs_ptr + scale_off, valid,
                hs < n_heads, QMAX, KV_KIND)


@triton.jit
def _load_rows(head_ptr, rows, row_stride, d, mask):
    """Load [len(rows), D] from one head; masked entries read as 0 (garbage there could be NaN, and 0 * NaN
    would leak into the output)."""
    return tl.load(head_ptr + rows[:, None] * row_stride + d[None, :], mask=mask, other=0.0)


@triton.jit
def _page_slots(table_row_ptr, pos, valid, PAGE_SIZE: tl.constexpr):
    """Pool slots of sequence positions `pos`, through one sequence's page table."""
    page = tl.load(table_row_ptr + pos // PAGE_SIZE, mask=valid, other=0)
    return page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE


@triton.jit
def _attend_tile(q, k, v, valid, acc, m_i, l_i, sm_scale_log2, softcap_log2, DOT_PRECISION: tl.constexpr,
                 SOFTCAP: tl.constexpr):
    """One online-softmax step: fold keys k / values v [N, D] (where `valid` [M, N]) into acc [M, D]. With
    SOFTCAP, scores s become tanh(s / softcap) * softcap (tanh as 2 sigmoid(2x) - 1: no tanh in every Triton)."""
    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale_log2
    if SOFTCAP:
        capped = 2.0 * tl.sigmoid(2.0 * (qk / softcap_log2)) - 1.0
        qk = capped * softcap_log2
    qk = tl.where(valid, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))  # m_i starts finite, so a fully masked tile gives no NaN
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _decode_split_kernel(
    q_ptr, kc_ptr, vc_ptr, ks_ptr, vs_ptr, rows_ptr, table_ptr, lens_ptr, part_out_ptr, part_lse_ptr,
    q_row_stride, q_head_stride, kc_slot_stride, kc_head_stride, vc_slot_stride, vc_head_stride,
    scale_slot_stride, table_stride, n_q_heads, group, head_dim, split_len, sm_scale_log2, softcap_log2, window,
    PAGE_SIZE: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr, KV_KIND: tl.constexpr, SOFTCAP: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)
    row = tl.load(rows_ptr + b).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kvh * group + g
    q_mask = (g < group)[:, None] & (d < head_dim)[None, :]
    q = tl.load(
        q_ptr + row * q_row_stride + heads[:, None] * q_head_stride + d[None, :], mask=q_mask, other=0.0
    )
    m_i = tl.full([BLOCK_G], -1e30, tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        valid = (pos < end) & (pos > seq_len - 1 - window)  # the query is at seq_len - 1
        slots = _page_slots(table_ptr + b * table_stride, pos, valid, PAGE_SIZE)
        kv_mask = valid[:, None] & (d < head_dim)[None, :]
        k = load_kv(kc_ptr + kvh * kc_head_stride, ks_ptr + kvh, slots, kc_slot_stride, scale_slot_stride, d,
                     kv_mask, valid, KV_KIND, q.dtype)
        v = load_kv(vc_ptr + kvh * vc_head_stride, vs_ptr + kvh, slots, vc_slot_stride, scale_slot_stride, d,
                     kv_mask, valid, KV_KIND, q.dtype)
        acc, m_i, l_i = _attend_tile(q, k, v, valid[None, :], acc, m_i, l_i, sm_scale_log2, softcap_log2,
                                     DOT_PRECISION, SOFTCAP)
    nonempty = l_i > 0  # a split past the end of a short sequence saw no key
    out = acc / tl.where(nonempty, l_i, 1.0)[:, None]
    lse = tl.where(nonempty, m_i + tl.log2(tl.where(nonempty, l_i, 1.0)), float("-inf"))  # base 2
    part = (b * n_q_heads + heads) * NUM_SPLITS + split
    tl.store(part_out_ptr + part[:, None] * head_dim + d[None, :], out, mask=q_mask)
    tl.store(part_lse_ptr + part, lse, mask=g < group)


@triton.jit
def _decode_reduce_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, rows_ptr, out_row_stride, out_head_stride, n_q_heads, head_dim,
    NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    base = (b * n_q_heads + h) * NUM_SPLITS
    lse = tl.load(part_lse_ptr + base + s, mask=s < NUM_SPLITS, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, 0))  # split 0 is never empty, so the max is finite
    mask = (s < NUM_SPLITS)[:, None] & (d < head_dim)[None, :]
    parts = tl.load(part_out_ptr + (base + s)[:, None] * head_dim + d[None, :], mask=mask, other=0.0)
    out = tl.sum(w[:, None] * parts, 0) / tl.sum(w, 0)
    row = tl.load(rows_ptr + b).to(tl.int64)
    dst = out_ptr + row * out_row_stride + h * out_head_stride + d
    tl.store(dst, out.to(out_ptr.dtype.element_ty), mask=d < head_dim)


@triton.jit
def _extend_kernel(
    q_ptr, k_ptr, v_ptr, kc_ptr, vc_ptr, ks_ptr, vs_ptr, out_ptr, seqs_ptr, blocks_ptr, table_ptr,
    q_row_stride, q_head_stride, k_row_stride, k_head_stride, v_row_stride, v_head_stride,
    kc_slot_stride, kc_head_stride, vc_slot_stride, vc_head_stride, scale_slot_stride, out_row_stride,
    out_head_stride, table_stride, group, head_dim, sm_scale_log2, softcap_log2, window,
    PAGE_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, KV_KIND: tl.constexpr, SOFTCAP: tl.constexpr,
):  # fmt: skip
    seq = tl.load(blocks_ptr + tl.program_id(0) * 2).to(tl.int64)
    m0 = tl.load(blocks_ptr + tl.program_id(0) * 2 + 1)
    h = tl.program_id(1)
    kvh = h // group
    tok0 = tl.load(seqs_ptr + seq * 3).to(tl.int64)
    ext = tl.load(seqs_ptr + seq * 3 + 1)
    prefix = tl.load(seqs_ptr + seq * 3 + 2)
    rows = m0 + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    d_ok = (d < head_dim)[None, :]
    q_mask = (rows < ext)[:, None] & d_ok
    q = _load_rows(q_ptr + h * q_head_stride, tok0 + rows, q_row_stride, d, q_mask)
    m_i = tl.full([BLOCK_M], -1e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Cached prefix, through the page table: every new token sees all of it.
    for n0 in range(0, prefix, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        valid = pos < prefix
        slots = _page_slots(table_ptr + seq * table_stride, pos, valid, PAGE_SIZE)
        kv_mask = valid[:, None] & d_ok
        k = load_kv(kc_ptr + kvh * kc_head_stride, ks_ptr + kvh, slots, kc_slot_stride, scale_slot_stride, d,
                     kv_mask, valid, KV_KIND, q.dtype)
        v = load_kv(vc_ptr + kvh * vc_head_stride, vs_ptr + kvh, slots, vc_slot_stride, scale_slot_stride, d,
                     kv_mask, valid, KV_KIND, q.dtype)
        seen = valid[None, :] & (pos[None, :] > prefix + rows[:, None] - window)  # query row r is at prefix + r
        acc, m_i, l_i = _attend_tile(q, k, v, seen, acc, m_i, l_i, sm_scale_log2, softcap_log2, DOT_PRECISION, SOFTCAP)
    # New tokens, causal: keys past this block's last row are never needed.
    for n0 in range(0, tl.minimum(ext, m0 + BLOCK_M), BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        kv_mask = (pos < ext)[:, None] & d_ok
        if KV_KIND == 0:
            k = _load_rows(k_ptr + kvh * k_head_stride, tok0 + pos, k_row_stride, d, kv_mask)
            v = _load_rows(v_ptr + kvh * v_head_stride, tok0 + pos, v_row_stride, d, kv_mask)
        else:  # codes: read back from the pool, as the prefix is
            slots = _page_slots(table_ptr + seq * table_stride, prefix + pos, pos < ext, PAGE_SIZE)
            k = load_kv(kc_ptr + kvh * kc_head_stride, ks_ptr + kvh, slots, kc_slot_stride, scale_slot_stride, d,
                         kv_mask, pos < ext, KV_KIND, q.dtype)
            v = load_kv(vc_ptr + kvh * vc_head_stride, vs_ptr + kvh, slots, vc_slot_stride, scale_slot_stride, d,
                         kv_mask, pos < ext, KV_KIND, q.dtype)
        valid = (pos[None, :] < ext) & (pos[None, :] <= rows[:, None]) & (pos[None, :] > rows[:, None] - window)
        acc, m_i, l_i = _attend_tile(q, k, v, valid, acc, m_i, l_i, sm_scale_log2, softcap_log2, DOT_PRECISION, SOFTCAP)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # padding rows past ext saw nothing
    dst = out_ptr + (tok0 + rows)[:, None] * out_row_stride + h * out_head_stride + d[None, :]
    tl.store(dst, out.to(out_ptr.dtype.element_ty), mask=q_mask)


# --------------------------------------------------------------------------------------------- launch plan


@dataclass(frozen=True)
class _Plan:
    """Device tensors the kernels read, derived once from an `AttentionMetadata`."""

    decode_rows: torch.Tensor | None  # int64 [Bd]
    decode_table: torch.Tensor | None  # int64 [Bd, max_pages]
    decode_lens: torch.Tensor | None  # int32 [Bd]
    extend_seqs: torch.Tensor | None  # int32 [Ne, 3]: token_start, extend_len, prefix_len
    extend_blocks: torch.Tensor | None  # int32 [n_blocks, 2]: sequence index, first query row
    extend_table: torch.Tensor | None  # int64 [Ne, max_pages], padded with page 0


_last_plan: tuple[weakref.ref, torch.device, _Plan] | None = None


def _build_plan(meta: AttentionMetadata, device: torch.device) -> _Plan:
    """Derive lengths, padded page tables and the extend block map (Python ints: no device sync)."""
    rows = table = lens = seqs = blocks = ext_table = None
    if meta.decode_rows is not None:
        assert meta.decode_pages is not None and meta.decode_mask is not None  # set with the decode rows
        rows = meta.decode_rows.to(device)
        table = meta.decode_pages.to(device)
        lens = meta.decode_mask.reshape(len(rows), -1).to(device).sum(1, dtype=torch.int32)
    if meta.extends:
        info = [(s.token_start, s.extend_len, s.prefix_len) for s in meta.extends]
        block_map = [
            (i, m0) for i, s in enumerate(meta.extends) for m0 in range(0, s.extend_len, _EXTEND_BLOCK_M)
        ]
        seqs = torch.tensor(info, dtype=torch.int32).to(device)
        blocks = torch.tensor(block_map, dtype=torch.int32).reshape(-1, 2).to(device)
        pages = [s.pages.to(device=device, dtype=torch.int64) for s in meta.extends]
        ext_table = torch.nn.utils.rnn.pad_sequence(pages, batch_first=True)
    return _Plan(rows, table, lens, seqs, blocks, ext_table)


def _plan_for(meta: AttentionMetadata, device: torch.device) -> _Plan:
    """The plan of `meta`, cached for the last metadata seen: all layers of one step share it."""
    global _last_plan
    cached = _last_plan
    if cached is not None and cached[0]() is meta and cached[1] == device:
        return cached[2]
    plan = _build_plan(meta, device)
    _last_plan = (weakref.ref(meta), device, plan)
    return plan


def _decode_splits(max_len: int, batch_heads: int) -> tuple[int, int]:
    """(number of splits, tokens per split) for contexts of at most `max_len` tokens."""
    want = max(1, _DECODE_TARGET_PROGRAMS // max(1, batch_heads))
    splits = max(1, min(_DECODE_MAX_SPLITS, want, triton.cdiv(max_len, _DECODE_MIN_SPLIT)))
    split_len = triton.cdiv(triton.cdiv(max_len, splits), _DECODE_BLOCK_N) * _DECODE_BLOCK_N
    return triton.cdiv(max_len, split_len), split_len


# --------------------------------------------------------------------------------------------- public API


@dataclass(frozen=True)
class _Pool:
    """One layer's pool as the kernels take it: fp8 codes as uint8, scales (or stand-ins) and the KV_KIND switch."""

    k: torch.Tensor
    v: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    kind: int
    qmax: float


def _pool(k_cache: torch.Tensor, v_cache: torch.Tensor, k_scale: torch.Tensor | None,
          v_scale: torch.Tensor | None) -> _Pool:
    if not is_quantized(k_cache):
        return _Pool(k_cache, v_cache, k_cache, v_cache, 0, 0.0)  # the scale arguments are never read
    if k_scale is None or v_scale is None:
        raise ValueError(f"a {k_cache.dtype} KV cache needs its k_scale and v_scale tensors")
    assert k_scale.stride(1) == v_scale.stride(1) == 1 and k_scale.stride(0) == v_scale.stride(0)
    codes = [c.view(torch.uint8) if c.dtype != torch.int8 else c for c in (k_cache, v_cache)]
    scales = [s.view(torch.int16) for s in (k_scale, v_scale)]  # the kernels move bf16 scales as bits
    return _Pool(codes[0], codes[1], scales[0], scales[1], KV_DTYPE_CODES[k_cache.dtype], QMAX[k_cache.dtype])


def store_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
) -> None:
    """Write new keys/values [T, Hkv, D] into their pool slots [T] (a quantized pool: codes and scales)."""
    n_tokens, n_heads, head_dim = k.shape
    if n_tokens == 0:
        return
    assert k.stride(-1) == v.stride(-1) == k_cache.stride(-1) == v_cache.stride(-1) == 1
    pool = _pool(k_cache, v_cache, k_scale, v_scale)
    _store_kv_kernel[(n_tokens,)](
        k, v, pool.k, pool.v, pool.k_scale, pool.v_scale, slots,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1), pool.k_scale.stride(0),
        n_heads, head_dim, QMAX=pool.qmax, KV_KIND=pool.kind, BLOCK_H=triton.next_power_of_2(n_heads),
        BLOCK_D=triton.next_power_of_2(head_dim), num_warps=4,
    )  # fmt: skip


@dataclass(frozen=True)
class _ScoreOptions:
    """Gemma's score options: a soft-cap on the scores, a sliding window over the keys (None: neither)."""

    softcap: float | None = None
    window: int | None = None


def _decode(
    q: torch.Tensor,
    pool: _Pool,
    out: torch.Tensor,
    plan: _Plan,
    page_size: int,
    scale: float,
    opts: _ScoreOptions,
) -> None:
    """Flash-decoding over the paged pool for the single-token rows of the batch."""
    assert plan.decode_rows is not None and plan.decode_table is not None  # the caller checked the rows
    n_rows, n_q_heads, head_dim = len(plan.decode_rows), q.shape[1], q.shape[2]
    k_cache, v_cache = pool.k, pool.v
    n_kv_heads = k_cache.shape[1]
    group = n_q_heads // n_kv_heads
    splits, split_len = _decode_splits(plan.decode_table.shape[1] * page_size, n_rows * n_kv_heads)
    part_out = torch.empty(n_rows, n_q_heads, splits, head_dim, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(n_rows, n_q_heads, splits, dtype=torch.float32, device=q.device)
    block_d = triton.next_power_of_2(head_dim)
    _decode_split_kernel[(n_rows, n_kv_heads, splits)](
        q, k_cache, v_cache, pool.k_scale, pool.v_scale, plan.decode_rows, plan.decode_table, plan.decode_lens,
        part_out, part_lse,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        pool.k_scale.stride(0), plan.decode_table.stride(0), n_q_heads, group, head_dim, split_len, scale * _LOG2E,
        (opts.softcap or 1.0) * _LOG2E, opts.window or _NO_WINDOW,
        PAGE_SIZE=page_size, NUM_SPLITS=splits, BLOCK_G=max(_MIN_DOT_ROWS, triton.next_power_of_2(group)),
        BLOCK_N=_DECODE_BLOCK_N, BLOCK_D=block_d, DOT_PRECISION=dot_precision(q.dtype), KV_KIND=pool.kind,
        SOFTCAP=opts.softcap is not None, num_warps=4, num_stages=2,
    )  # fmt: skip
    _decode_reduce_kernel[(n_rows, n_q_heads)](
        part_out, part_lse, out, plan.decode_rows, out.stride(0), out.stride(1), n_q_heads, head_dim,
        NUM_SPLITS=splits, BLOCK_S=triton.next_power_of_2(splits), BLOCK_D=block_d, num_warps=1,
    )  # fmt: skip


def _extend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pool: _Pool,
    out: torch.Tensor,
    plan: _Plan,
    page_size: int,
    scale: float,
    opts: _ScoreOptions,
) -> None:
    """Prefix-then-causal attention for the multi-token sequences of the batch."""
    k_cache, v_cache = pool.k, pool.v
    assert plan.extend_blocks is not None and plan.extend_table is not None  # the caller checked the blocks
    n_q_heads, head_dim = q.shape[1], q.shape[2]
    group = n_q_heads // k.shape[1]
    # Smaller key tiles and more warps where tiles are big (fp32, wide heads): shared memory and registers.
    wide = q.dtype == torch.float32 or head_dim > 128
    block_n, warps = (32, 8) if wide else (64, 4)
    _extend_kernel[(len(plan.extend_blocks), n_q_heads)](
        q, k, v, k_cache, v_cache, pool.k_scale, pool.v_scale, out, plan.extend_seqs, plan.extend_blocks,
        plan.extend_table,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1), pool.k_scale.stride(0),
        out.stride(0), out.stride(1), plan.extend_table.stride(0), group, head_dim, scale * _LOG2E,
        (opts.softcap or 1.0) * _LOG2E, opts.window or _NO_WINDOW,
        PAGE_SIZE=page_size, BLOCK_M=_EXTEND_BLOCK_M, BLOCK_N=block_n, BLOCK_D=triton.next_power_of_2(head_dim),
        DOT_PRECISION=dot_precision(q.dtype), KV_KIND=pool.kind, SOFTCAP=opts.softcap is not None,
        num_warps=warps, num_stages=2,
    )  # fmt: skip


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    softcap: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """Attention for a flat batch: q [T, Hq, D], this step's k/v [T, Hkv, D] (already stored in the pool).

    Returns [T, Hq, D]. GQA: Hq is a multiple of Hkv. The last dim of every tensor must be contiguous. A quantized
    pool (int8 / fp8 codes) comes with its bf16 scales [slots, Hkv]. `softcap` turns scores s into
    tanh(s / softcap) * softcap before the softmax; `window` lets a query see only the `window` latest keys.
    """
    opts = _ScoreOptions(softcap, window)
    assert q.stride(-1) == k.stride(-1) == v.stride(-1) == k_cache.stride(-1) == v_cache.stride(-1) == 1
    out = torch.empty_like(q)
    plan = _plan_for(meta, q.device)
    pool = _pool(k_cache, v_cache, k_scale, v_scale)
    if plan.decode_rows is not None and len(plan.decode_rows) > 0:
        _decode(q, pool, out, plan, meta.page_size, scale, opts)
    if plan.extend_blocks is not None and len(plan.extend_blocks) > 0:
        _extend(q, k, v, pool, out, plan, meta.page_size, scale, opts)
    return out
