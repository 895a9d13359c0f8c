"""Attention over a paged KV pool (torch reference).

The pool of one layer is `k_cache`/`v_cache` of shape [num_pages * page_size, Hkv, D]; token slot `s` lives in
page `s // page_size`. A step runs a flat batch of tokens from many sequences: sequences that add one token
(decode) are attended together in one padded batch, sequences that add several (prefill, or extend after a cached
prefix) one at a time, causal within the new tokens and full over the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class ExtendSeq:
    """A sequence adding `extend_len` tokens after `prefix_len` cached ones."""

    token_start: int  # first row of this sequence in the flat token batch
    extend_len: int
    prefix_len: int
    pages: torch.Tensor  # int64 page ids covering prefix_len + extend_len tokens
    mask: torch.Tensor | None  # bool [extend_len, seq_len]; None when there is no prefix (plain causal)


@dataclass(frozen=True)
class AttentionMetadata:
    """Per-step layout of the flat batch, computed once and shared by every layer."""

    page_size: int
    decode_rows: torch.Tensor | None  # int64 [Bd]: rows of the flat batch that are single-token sequences
    decode_pages: torch.Tensor | None  # int64 [Bd, max_pages] page table, padded with page 0
    decode_mask: torch.Tensor | None  # bool [Bd, 1, 1, max_pages * page_size]: True where a key is valid
    extends: tuple[ExtendSeq, ...]

    @staticmethod
    def build(
        page_size: int, extend_lens: list[int], prefix_lens: list[int], page_tables: list[torch.Tensor]
    ) -> AttentionMetadata:
        """Lay out sequences given in flat-batch order by their new-token and cached-token counts."""
        decode_rows: list[int] = []
        decode_tables: list[torch.Tensor] = []
        decode_lens: list[int] = []
        extends: list[ExtendSeq] = []
        start = 0
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
        if not decode_rows:
            return AttentionMetadata(page_size, None, None, None, tuple(extends))
        max_pages = max(len(t) for t in decode_tables)
        table = torch.zeros(len(decode_tables), max_pages, dtype=torch.int64)
        for i, t in enumerate(decode_tables):
            table[i, : len(t)] = t
        lens = torch.tensor(decode_lens)
        mask = torch.arange(max_pages * page_size).unsqueeze(0) < lens.unsqueeze(1)
        return AttentionMetadata(
            page_size, torch.tensor(decode_rows), table, mask[:, None, None, :], tuple(extends)
        )


def store_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """Write new keys/values [T, Hkv, D] into their pool slots [T]."""
    k_cache.index_copy_(0, slots, k)
    v_cache.index_copy_(0, slots, v)


def _gather_pages(cache: torch.Tensor, pages: torch.Tensor, page_size: int) -> torch.Tensor:
    """[..., n_pages] page ids → [..., n_pages * page_size, Hkv, D] keys or values."""
    paged = cache.view(-1, page_size, *cache.shape[1:])
    out = paged[pages]
    return out.flatten(-4, -3)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Attention for a flat batch: q [T, Hq, D], this step's k/v [T, Hkv, D] (already stored in the pool).

    Returns [T, Hq, D]. GQA: Hq is a multiple of Hkv.
    """
    out = torch.empty_like(q)
    if meta.decode_rows is not None:
        qd = q.index_select(0, meta.decode_rows).unsqueeze(2)  # [Bd, Hq, 1, D]
        kd = _gather_pages(k_cache, meta.decode_pages, meta.page_size).transpose(1, 2)
        vd = _gather_pages(v_cache, meta.decode_pages, meta.page_size).transpose(1, 2)
        od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=meta.decode_mask, scale=scale, enable_gqa=True)
        out.index_copy_(0, meta.decode_rows, od.squeeze(2))
    for seq in meta.extends:
        rows = slice(seq.token_start, seq.token_start + seq.extend_len)
        qe = q[rows].transpose(0, 1).unsqueeze(0)  # [1, Hq, ext, D]
        if seq.mask is None:
            # No cached prefix: the new tokens are the whole sequence, no pool read needed.
            ke, ve = k[rows].transpose(0, 1).unsqueeze(0), v[rows].transpose(0, 1).unsqueeze(0)
            oe = F.scaled_dot_product_attention(qe, ke, ve, is_causal=True, scale=scale, enable_gqa=True)
        else:
            seq_len = seq.prefix_len + seq.extend_len
            ke = _gather_pages(k_cache, seq.pages, meta.page_size)[:seq_len].transpose(0, 1).unsqueeze(0)
            ve = _gather_pages(v_cache, seq.pages, meta.page_size)[:seq_len].transpose(0, 1).unsqueeze(0)
            oe = F.scaled_dot_product_attention(qe, ke, ve, attn_mask=seq.mask, scale=scale, enable_gqa=True)
        out[rows] = oe.squeeze(0).transpose(0, 1)
    return out
