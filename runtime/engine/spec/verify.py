"""Which draft tokens the target keeps, and the token it adds after them.

Every speculating request brings k+1 logits rows from one forward: row j is the target's distribution after the
request's tokens plus the first j draft tokens. Each row goes through the ordinary sampler as if the request had
already accepted those j drafts: logit bias, penalties and the min_new_tokens ban read the history extended by
them, the grammar row is the matcher's state after them, and a seeded row draws the noise of its own token index.
Row j's pick t_j is therefore exactly the token plain decoding would produce at that position; the drafts are
kept while d_{j+1} == t_j, and the first t_j that differs (or t_k after a fully kept draft) is appended.

For greedy rows this is the longest matching prefix. For sampled rows it is speculative rejection sampling for a
point-mass proposal (both proposers propose deterministically): a draft d is kept with probability p(d) =
min(1, p(d)/q(d)) and, when rejected, the token comes from p without d, renormalized — the residual (p - q)+.
Drawing the target's own sample and comparing realizes both at once, so the output distribution is the target's
by construction and a seeded request repeats exactly, with or without speculation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import torch

from sprig.runtime.engine.penalties import TokenHistory
from sprig.runtime.engine.request import Logprob, Request
from sprig.runtime.engine.sampler import Sampler, SamplingBatch


@dataclass(frozen=True)
class VerifyRow:
    """One speculating request: its draft and the target's logits after each draft prefix."""

    req: Request
    draft: list[int]
    logits: torch.Tensor  # [len(draft) + 1, V]
    bitmask: torch.Tensor | None  # int32 [len(draft) + 1, W] grammar rows, or None when unconstrained


@dataclass(frozen=True)
class Verdict:
    """The tokens a verification adds: the kept drafts, then the target's own token."""

    tokens: list[int]
    accepted: int  # draft tokens kept (len(tokens) - 1)
    logprobs: list[Logprob]  # one per token when the request asked for logprobs


class _Extended(Sequence[int]):
    """`base + extra` without copying `base` (a request's output with some draft tokens after it)."""

    def __init__(self, base: Sequence[int], extra: Sequence[int]) -> None:
        self.base = base
        self.extra = extra

    def __len__(self) -> int:
        return len(self.base) + len(self.extra)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice):
            return list(self)[i]
        if i < 0:
            i += len(self)
        return self.base[i] if i < len(self.base) else self.extra[i - len(self.base)]

    def __iter__(self) -> Iterator[int]:
        yield from self.base
        yield from self.extra


def verify(sampler: Sampler, rows: list[VerifyRow], vocab_size: int, eos_token_ids: Sequence[int]) -> list[Verdict]:
    """Sample every row of every speculating request in one sampler pass and keep each draft's matching prefix."""
    params, prompts, outputs, histories, asks, tops = [], [], [], [], [], []
    for row in rows:
        req = row.req
        for j in range(len(row.draft) + 1):
            params.append(req.params)
            prompts.append(req.prompt_ids)
            outputs.append(_Extended(req.output_ids, row.draft[:j]))
            histories.append(TokenHistory(req.prompt_ids, outputs[-1]) if req.penalties is not None else None)
            asks.append(req.logprobs.return_logprob)
            tops.append(req.logprobs.top_logprobs_num)
    logits = torch.cat([row.logits for row in rows]) if len(rows) > 1 else rows[0].logits
    batch = SamplingBatch.build(params, prompts, outputs, vocab_size, eos_token_ids, return_logprob=asks,
                                top_logprobs_num=tops, device=logits.device, histories=histories)
    bitmask = _stack_masks(rows, vocab_size)
    result = sampler.sample(logits, batch, bitmask)
    picks = result.next_token_ids.tolist()
    verdicts = []
    start = 0
    for row in rows:
        n = len(row.draft) + 1
        targets = picks[start : start + n]
        kept = 0
        while kept < len(row.draft) and row.draft[kept] == targets[kept]:
            kept += 1
        logprobs: list[Logprob] = []
        if row.req.logprobs.return_logprob and result.logprobs is not None:
            for j in range(kept + 1):
                top = [(v, i) for i, v in result.top_logprobs_of(start + j)]
                logprobs.append((float(result.logprobs[start + j]), targets[j], top))
        verdicts.append(Verdict(row.draft[:kept] + [targets[kept]], kept, logprobs))
        start += n
    return verdicts


def _stack_masks(rows: list[VerifyRow], vocab_size: int) -> torch.Tensor | None:
    """The grammar rows of every verified position (all allowed for unconstrained requests), or None."""
    if all(row.bitmask is None for row in rows):
        return None
    words = (vocab_size + 31) // 32
    parts = [row.bitmask if row.bitmask is not None else torch.full((len(row.draft) + 1, words), -1, dtype=torch.int32)
             for row in rows]
    return torch.cat(parts)
