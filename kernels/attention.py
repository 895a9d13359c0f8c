"""Attention over a paged KV pool (torch reference).

The pool of one layer is `k_cache`/`v_cache` of shape [num_pages * page_size, Hkv, D]; token slot `s` lives in
page `s // page_size`. A step runs a flat batch of tokens from many sequences: sequences that add one token
(decode) are attended together in one padded batch, sequences that add several (prefill, or extend after a cached
prefix) one at a time, causal within the new tokens and full over the prefix.

Decode rows whose page tables start with the same pages (a prefix shared through the radix tree) are attended in
two parts merged by log-sum-exp: the shared pages once for the whole group, as one matrix product over all its
queries, and each row's own remaining pages. The shared prefix is then read once per step instead of once per
request, which is where a prefix-sharing workload spends its decode time on a CPU. The C kernel reads the same
groups (`DecodeSplit.rows/offsets/shared_pages`) and runs their part on AMX tiles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F

from sprig.kernels.kv_quant import as_bytes, dequantize_kv, is_quantized, store_kv_quantized


@dataclass(frozen=True)
class ExtendSeq:
    """A sequence adding `extend_len` tokens after `prefix_len` cached ones."""

    token_start: int  # first row of this sequence in the flat token batch
    extend_len: int
    prefix_len: int
    pages: torch.Tensor  # int64 page ids covering prefix_len + extend_len tokens
    mask: torch.Tensor | None  # bool [extend_len, seq_len]; None when there is no prefix (plain causal)


MIN_SHARED_TOKENS = 64  # shorter common prefixes are not worth a separate pass


@dataclass(frozen=True)
class DecodeGroup:
    """Decode rows (indices into the decode batch) whose first `pages` are the same."""

    rows: torch.Tensor  # int64 [n]
    pages: torch.Tensor  # int64 [n_shared_pages]


@dataclass(frozen=True)
class DecodeSplit:
    """The decode batch as shared-prefix groups plus each row's remaining pages."""

    groups: tuple[DecodeGroup, ...]
    suffix_pages: torch.Tensor  # int64 [Bd, max_suffix_pages], padded with page 0
    suffix_mask: torch.Tensor  # float [Bd, 1, 1, max_suffix_pages * page_size]: 0 valid, -inf padding
    # The groups flat, as the C kernel reads them: rows[offsets[g]:offsets[g + 1]] share shared_pages[g] pages.
    rows: torch.Tensor  # int64 [rows in groups]
    offsets: torch.Tensor  # int64 [groups + 1]
    shared_pages: torch.Tensor  # int64 [groups]


@dataclass(frozen=True)
class AttentionMetadata:
    """Per-step layout of the flat batch, computed once and shared by every layer."""

    page_size: int
    decode_rows: torch.Tensor | None  # int64 [Bd]: rows of the flat batch that are single-token sequences
    decode_pages: torch.Tensor | None  # int64 [Bd, max_pages] page table, padded with page 0
    decode_mask: torch.Tensor | None  # bool [Bd, 1, 1, max_pages * page_size]: True where a key is valid
    extends: tuple[ExtendSeq, ...]
    decode_split: DecodeSplit | None = None  # set when some decode rows share prefix pages
    decode_lens: torch.Tensor | None = None  # int64 [Bd]: keys per decode row (the new token included)
    # `extends` as the C kernel reads them: padded page tables and rows (token_start, extend_len, prefix_len)
    extend_pages: torch.Tensor | None = None  # int64 [S, max_pages]
    extend_layout: torch.Tensor | None = None  # int64 [3, S]
    longest: int | None = None  # keys of the longest sequence; None: not known (static decode buffers)

    def to(self, device: torch.device) -> AttentionMetadata:
        """The same layout with every tensor on `device` (built on the CPU, used where the pool lives)."""
        if device.type == "cpu":
            return self
        return _move(self, device)

    @staticmethod
    def build(
        page_size: int, extend_lens: list[int], prefix_lens: list[int], page_tables: list[torch.Tensor],
        split_shared_prefixes: bool = True,
    ) -> AttentionMetadata:
        """Lay out sequences given in flat-batch order by their new-token and cached-token counts.

        `split_shared_prefixes=False` skips finding shared-prefix groups (`decode_split`), for backends that do
        not read them.
        """
        decode_rows: list[int] = []
        decode_tables: list[torch.Tensor] = []
        decode_lens: list[int] = []
        extends: list[ExtendSeq] = []
        start = 0
        longest = max((e + p for e, p in zip(extend_lens, prefix_lens, strict=True)), default=0)
        for ext, prefix, pages in zip(extend_lens, prefix_lens, page_tables, strict=True):
            seq_len = ext + prefix
            n_pages = -(-seq_len // page_size)
            if ext == 1:
                decode_rows.append(start)
                decode_tables.append(pages[:n_pages])
                decode_lens.append(seq_len)
            else:
                mask = None
                if prefix > 0:
                    q_pos = torch.arange(ext).unsqueeze(1) + prefix
                    mask = torch.arange(seq_len).unsqueeze(0) <= q_pos
                extends.append(ExtendSeq(start, ext, prefix, pages[:n_pages], mask))
            start += ext
        extend_pages = extend_layout = None
        if extends:
            extend_pages = _pad_tables([e.pages for e in extends])
            extend_layout = torch.tensor([[e.token_start for e in extends], [e.extend_len for e in extends],
                                          [e.prefix_len for e in extends]])
        if not decode_rows:
            return AttentionMetadata(page_size, None, None, None, tuple(extends), extend_pages=extend_pages,
                                     extend_layout=extend_layout, longest=longest)
        table = _pad_tables(decode_tables)
        lens = torch.tensor(decode_lens)
        mask = torch.arange(table.shape[1] * page_size).unsqueeze(0) < lens.unsqueeze(1)
        split = _split_shared_prefixes(page_size, table, lens) if split_shared_prefixes else None
        return AttentionMetadata(
            page_size, torch.tensor(decode_rows), table, mask[:, None, None, :], tuple(extends), split, lens,
            extend_pages, extend_layout, longest,
        )


def _pad_tables(tables: list[torch.Tensor]) -> torch.Tensor:
    """Page tables of different lengths as one int64 [len(tables), longest] tensor, padded with page 0."""
    out = torch.zeros(len(tables), max(len(t) for t in tables), dtype=torch.int64)
    for i, t in enumerate(tables):
        out[i, : len(t)] = t
    return out


def _split_shared_prefixes(page_size: int, table: torch.Tensor, lens: torch.Tensor) -> DecodeSplit | None:
    """Group decode rows by their first page and keep the groups whose common prefix is long enough.

    `table` is the padded [Bd, max_pages] page table, `lens` the keys per row. A row's last page (its own new
    token's) is never counted as shared. Vectorized: a Python loop over the rows costs milliseconds per step.
    """
    n_pages = (lens + page_size - 1) // page_size
    order = torch.sort(table[:, 0], stable=True).indices  # rows with the same first page become adjacent
    first = table[order, 0]
    starts = torch.ones_like(first, dtype=torch.bool)
    starts[1:] = first[1:] != first[:-1]
    group_of = starts.cumsum(0) - 1  # group index of each sorted row
    leader = order[starts][group_of]  # each sorted row's group leader (its first row)
    cols = torch.arange(table.shape[1])
    same = (table[order] == table[leader]) & (cols < (n_pages[order] - 1).unsqueeze(1))
    common = same.int().cumprod(1).sum(1)  # leading pages each row shares with its leader
    n_groups = int(group_of[-1]) + 1
    shared = torch.full((n_groups,), table.shape[1], dtype=torch.int64).scatter_reduce(0, group_of, common, "amin")
    sizes = torch.bincount(group_of, minlength=n_groups)
    keep = (sizes >= 2) & (shared >= -(-MIN_SHARED_TOKENS // page_size))
    if not bool(keep.any()):
        return None
    kept_rows = keep[group_of]
    rows, row_groups = order[kept_rows], group_of[kept_rows]
    shared_pages, group_sizes = shared[keep], sizes[keep]
    offsets = torch.zeros(len(group_sizes) + 1, dtype=torch.int64)
    offsets[1:] = group_sizes.cumsum(0)
    per_row = torch.zeros(len(table), dtype=torch.int64)
    per_row[rows] = shared[row_groups]
    groups = tuple(
        DecodeGroup(r, table[r[0], :n])
        for r, n in zip(torch.split(rows, group_sizes.tolist()), shared_pages.tolist(), strict=True)
    )
    width = int((n_pages - per_row).max())
    idx = per_row.unsqueeze(1) + torch.arange(width)
    suffix_pages = torch.where(idx < n_pages.unsqueeze(1), table.gather(1, idx.clamp(max=table.shape[1] - 1)), 0)
    valid = torch.arange(width * page_size).unsqueeze(0) < (lens - per_row * page_size).unsqueeze(1)
    mask = torch.zeros(valid.shape).masked_fill_(~valid, float("-inf"))[:, None, None, :]
    return DecodeSplit(groups, suffix_pages, mask, rows, offsets, shared_pages)


def _move(obj, device: torch.device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, tuple):
        return tuple(_move(x, device) for x in obj)
    if hasattr(obj, "__dataclass_fields__"):
        return replace(obj, **{f.name: _move(getattr(obj, f.name), device) for f in fields(obj)})
    return obj


DecodeFn = Callable[..., torch.Tensor]  # the signature of `decode_attention`
ExtendFn = Callable[..., None]  # the signature of `extend_attention`


def store_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
) -> None:
    """Write new keys/values [T, Hkv, D] into their pool slots [T].

    A quantized cache (int8 / fp8 codes, `kernels/kv_quant.py`) comes with its scale tensors [slots, Hkv].
    """
    if k_scale is not None and v_scale is not None:
        store_kv_quantized(k_cache, v_cache, k_scale, v_scale, slots, k, v)
        return
    if is_quantized(k_cache):
        raise ValueError(f"a {k_cache.dtype} KV cache needs its k_scale and v_scale tensors")
    k_cache.index_copy_(0, slots, k)
    v_cache.index_copy_(0, slots, v)


def _select_pages(cache: torch.Tensor, pages: torch.Tensor, page_size: int) -> torch.Tensor:
    """[..., n_pages] page ids → [..., n_pages * page_size, *cache.shape[1:]] rows of `cache`."""
    paged = cache.view(-1, page_size, *cache.shape[1:])
    # index_select copies whole pages; advanced indexing (`paged[pages]`) is ~6x slower on the CPU.
    out = paged.index_select(0, pages.reshape(-1)).view(*pages.shape, *paged.shape[1:])
    return out.flatten(len(pages.shape) - 1, len(pages.shape))


def _gather_pages(
    cache: torch.Tensor, pages: torch.Tensor, page_size: int, scales: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """[..., n_pages] page ids → [..., n_pages * page_size, Hkv, D] keys or values; a quantized cache (with its
    `scales`) is dequantized to `dtype`."""
    if scales is None:
        return _select_pages(cache, pages, page_size)
    assert dtype is not None  # the caller names the dtype to dequantize to
    codes = _select_pages(as_bytes(cache), pages, page_size).view(cache.dtype)
    return dequantize_kv(codes, _select_pages(scales, pages, page_size), dtype)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    decode: DecodeFn | None = None,
    extend: ExtendFn | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    softcap: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """Attention for a flat batch: q [T, Hq, D], this step's k/v [T, Hkv, D] (already stored in the pool).

    Returns [T, Hq, D]. GQA: Hq is a multiple of Hkv. `decode` and `extend` replace `decode_attention` and
    `extend_attention` (the CPU backend passes its C kernels). A quantized pool comes with `k_scale`/`v_scale`
    [slots, Hkv], and then every key and value is read back from the pool, this step's too. `softcap` turns scores
    s into tanh(s / softcap) * softcap before the softmax; `window` lets a query see only the `window` latest keys
    (its own included). Either runs these torch references, whatever `decode` and `extend` say, but a window that
    every sequence of the step fits in (`meta.longest`) is no window.
    """
    kv: dict[str, Any] = {"k_scale": k_scale, "v_scale": v_scale}
    if window is not None and meta.longest is not None and meta.longest <= window:
        window = None  # why: every sequence fits in the window: that is full attention, which the C kernels run
    if softcap is not None or window is not None:
        kv |= {"softcap": softcap, "window": window}
        decode, extend = None, None  # why: sprig's C kernels have neither a soft-cap nor a window yet
    decode_fn = decode or decode_attention
    if not meta.extends and meta.decode_rows is not None and meta.decode_rows.numel() == q.shape[0]:
        return decode_fn(q, k_cache, v_cache, meta, scale, **kv)  # a pure decode step: every row, no copies
    out = torch.empty_like(q)
    if meta.decode_rows is not None:
        qd = q.index_select(0, meta.decode_rows)
        out.index_copy_(0, meta.decode_rows, decode_fn(qd, k_cache, v_cache, meta, scale, **kv))
    (extend or extend_attention)(q, k, v, k_cache, v_cache, meta, scale, out, **kv)
    return out


def decode_attention(
    qd: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None, softcap: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """Attention of the decode rows' queries qd [Bd, Hq, D] over their pages; returns [Bd, Hq, D]."""
    if meta.decode_split is not None and softcap is None and window is None:
        return _split_decode_attention(qd, k_cache, v_cache, meta, scale, k_scale, v_scale)
    assert meta.decode_pages is not None and meta.decode_mask is not None  # set with the decode rows
    pages, mask = meta.decode_pages, meta.decode_mask
    if softcap is not None or window is not None:
        pages, mask = _decode_span(pages, mask, meta.page_size, window)
    kd = _gather_pages(k_cache, pages, meta.page_size, k_scale, qd.dtype).transpose(1, 2)
    vd = _gather_pages(v_cache, pages, meta.page_size, v_scale, qd.dtype).transpose(1, 2)
    if softcap is not None:
        return _capped_attention(qd.unsqueeze(2), kd, vd, mask, scale, softcap).squeeze(2)
    od = F.scaled_dot_product_attention(qd.unsqueeze(2), kd, vd, attn_mask=mask, scale=scale, enable_gqa=True)
    return od.squeeze(2)


def _decode_span(pages: torch.Tensor, mask: torch.Tensor, page_size: int, window: int | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode page table and key mask cut to the pages some row reads: up to the longest row (static decode
    buffers pad tables to the whole context) and, with a `window`, from the oldest key a row still sees; the mask
    then also hides each row's keys older than its window. Reads the lengths on the host (this path is the
    reference for Gemma's layers, never captured in a graph)."""
    lens = mask.reshape(mask.shape[0], -1).sum(1)
    hi = -(-int(lens.max()) // page_size)
    lo = 0 if window is None else max(0, int(lens.min()) - window) // page_size
    pages, mask = pages[:, lo:hi], mask[..., lo * page_size : hi * page_size]
    if window is not None:
        keys = torch.arange(lo * page_size, hi * page_size, device=mask.device)
        mask = mask & (keys.unsqueeze(0) >= (lens - window).unsqueeze(1))[:, None, None, :]
    return pages, mask


def _capped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
                      softcap: float) -> torch.Tensor:
    """softmax(tanh(q k^T * scale / softcap) * softcap, masked) v in transformers' eager order: q [B, Hq, L, D],
    k/v [B, Hkv, T, D], `mask` bool (True: attend) broadcasting to [B, Hq, L, T]; the softmax in fp32."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)


def _extend_mask(seq: ExtendSeq, window: int | None) -> torch.Tensor | None:
    """The keys each new token of `seq` sees (bool [extend_len, seq_len]): causal, and within `window` if given."""
    if window is None:
        return seq.mask
    q_pos = torch.arange(seq.extend_len).unsqueeze(1) + seq.prefix_len
    keys = torch.arange(seq.prefix_len + seq.extend_len).unsqueeze(0)
    return (keys <= q_pos) & (keys > q_pos - window)


def extend_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    out: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    softcap: float | None = None,
    window: int | None = None,
) -> None:
    """Write into `out` the attention of every multi-token sequence (prefill or extend after a prefix).

    With a quantized pool (`k_scale`/`v_scale` given) the new tokens' keys and values are read back from it too:
    a token then sees the same keys whether they were computed in this step or cached earlier.
    """
    for seq in meta.extends:
        rows = slice(seq.token_start, seq.token_start + seq.extend_len)
        qe = q[rows].transpose(0, 1).unsqueeze(0)  # [1, Hq, ext, D]
        mask = _extend_mask(seq, window)
        if seq.prefix_len == 0 and k_scale is None:
            # No cached prefix: the new tokens are the whole sequence, no pool read needed.
            ke, ve = k[rows].transpose(0, 1).unsqueeze(0), v[rows].transpose(0, 1).unsqueeze(0)
        else:
            seq_len = seq.prefix_len + seq.extend_len
            kg = _gather_pages(k_cache, seq.pages, meta.page_size, k_scale, q.dtype)
            vg = _gather_pages(v_cache, seq.pages, meta.page_size, v_scale, q.dtype)
            ke = kg[:seq_len].transpose(0, 1).unsqueeze(0)
            ve = vg[:seq_len].transpose(0, 1).unsqueeze(0)
        if softcap is not None:
            causal = mask if mask is not None else torch.ones(seq.extend_len, seq.extend_len, dtype=torch.bool).tril()
            oe = _capped_attention(qe, ke, ve, causal.to(q.device), scale, softcap)
        else:
            oe = F.scaled_dot_product_attention(qe, ke, ve, attn_mask=None if mask is None else mask.to(q.device),
                                                is_causal=mask is None, scale=scale, enable_gqa=True)
        out[rows] = oe.squeeze(0).transpose(0, 1)


_flash_with_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # returns (out, logsumexp)


def _attend_with_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale + mask) v and its log-sum-exp; q [B, H, L, D], k/v [B, H, T, D] (same H)."""
    if q.device.type == "cpu":
        if mask is not None:
            mask = mask.to(q.dtype)
        out, lse = _flash_with_lse(q, k, v, 0.0, False, attn_mask=mask, scale=scale)
        return out, lse
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), v.float()).to(q.dtype), lse


def _split_decode_attention(
    qd: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
    k_scale: torch.Tensor | None, v_scale: torch.Tensor | None,
) -> torch.Tensor:
    """Decode attention as (shared prefix per group) ⊕ (own pages per row), merged by log-sum-exp."""
    split = meta.decode_split
    assert split is not None  # the caller checked
    bd, hq, d = qd.shape
    hkv = k_cache.shape[1]
    g = hq // hkv
    qs = qd.view(bd, hkv, g, d)  # GQA: a kv head's query heads become the query length
    ks = _gather_pages(k_cache, split.suffix_pages, meta.page_size, k_scale, qd.dtype).transpose(1, 2)
    vs = _gather_pages(v_cache, split.suffix_pages, meta.page_size, v_scale, qd.dtype).transpose(1, 2)
    out, lse = _attend_with_lse(qs, ks, vs, split.suffix_mask, scale)  # [Bd, Hkv, G, D], [Bd, Hkv, G]
    out = out.float()
    for group in split.groups:
        n = len(group.rows)
        kp = _gather_pages(k_cache, group.pages, meta.page_size, k_scale, qd.dtype).transpose(0, 1).unsqueeze(0)
        vp = _gather_pages(v_cache, group.pages, meta.page_size, v_scale, qd.dtype).transpose(0, 1).unsqueeze(0)
        qg = qs.index_select(0, group.rows).permute(1, 0, 2, 3).reshape(1, hkv, n * g, d)
        og, lg = _attend_with_lse(qg, kp, vp, None, scale)  # the whole group's queries in one pass
        og = og.reshape(hkv, n, g, d).permute(1, 0, 2, 3).float()
        lg = lg.reshape(hkv, n, g).permute(1, 0, 2)
        l_own = lse.index_select(0, group.rows)
        total = torch.logaddexp(l_own, lg)
        merged = out.index_select(0, group.rows) * torch.exp(l_own - total).unsqueeze(-1) + og * torch.exp(
            lg - total
        ).unsqueeze(-1)
        out.index_copy_(0, group.rows, merged)
        lse.index_copy_(0, group.rows, total)
    return out.to(qd.dtype).view(bd, hq, d)
