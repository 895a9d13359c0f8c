"""Speculation in the step loop: draft tokens ride on decode rows, the target verifies them, rejects give pages back.

Before the forward, `propose` gives each eligible decode row (one new token, sampling next) up to k draft tokens
from the proposer, cut where the grammar refuses one, and reserves their KV — never by preempting anyone: a row
that cannot get pages speculates less. The row then carries its last token and the drafts and asks for every
position's logits; attention treats it as an extend over its cached prefix, on every backend.

After the forward, `verify` (verify.py) picks the kept prefix; the engine appends those tokens and this module
sets the request's KV length to the positions the target computed for tokens that stayed, and gives back the
pages beyond it, so page accounting and later radix insertions see exactly what plain decoding would have left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.kv_cache import KVCacheManager
from sprig.runtime.engine.request import Request
from sprig.runtime.engine.spec.adaptive import AcceptanceHistory, DraftLength
from sprig.runtime.engine.spec.tally import SpecTally

logger = logging.getLogger(__name__)


class Proposer(Protocol):
    """Guesses the next tokens of several requests at once."""

    def propose_batch(self, reqs: Sequence[Request], ks: Sequence[int]) -> list[list[int]]:
        """At most ks[i] draft tokens continuing reqs[i].fill_ids."""
        ...

    def release(self, rid: str) -> None:
        """Forget a request that left or was preempted."""
        ...


@dataclass(frozen=True)
class Draft:
    """The tokens a decode row carries after its last token, with the grammar rows of each verified position."""

    tokens: list[int]
    bitmask: torch.Tensor | None  # int32 [len(tokens) + 1, W]; None when unconstrained


@dataclass
class SpecCounters:
    """Engine-wide speculation figures."""

    verify_steps: int = 0  # request-verifications (one speculating row in one forward)
    proposed_tokens: int = 0
    accepted_tokens: int = 0  # draft tokens the target kept
    emitted_tokens: int = 0  # tokens verifications appended: kept drafts, the target's token, jump-forward
    proposer_errors: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.proposed_tokens if self.proposed_tokens else 0.0

    @property
    def mean_accept_length(self) -> float:
        return self.emitted_tokens / self.verify_steps if self.verify_steps else 0.0


@dataclass
class Speculator:
    """Owns the proposer and each request's draft-length controller."""

    config: EngineConfig
    kv: KVCacheManager
    proposer: Proposer
    vocab_size: int
    counters: SpecCounters = field(default_factory=SpecCounters)
    _lengths: dict[str, DraftLength] = field(default_factory=dict)
    _history: AcceptanceHistory = field(default_factory=AcceptanceHistory)

    def track(self, req: Request) -> None:
        """Give a new request its tally of verifications."""
        req.spec = SpecTally()

    def propose(self, reqs: Sequence[Request]) -> dict[Request, Draft]:
        """Drafts for the given decode rows (those that get none are left out), their KV pages reserved."""
        wanted: list[Request] = []
        ks: list[int] = []
        for req in reqs:
            k = min(self._length(req).next_k(), req.params.max_new_tokens - len(req.output_ids) - 1)
            if k > 0:
                wanted.append(req)
                ks.append(k)
        if not wanted:
            return {}
        try:
            proposals = self.proposer.propose_batch(wanted, ks)
        except Exception:  # noqa: BLE001 - a failing proposer costs speed, never requests: decode plainly
            logger.exception("the %s proposer failed; decoding without drafts this step", self.config.speculative_algorithm)
            self.counters.proposer_errors += 1
            for req in wanted:
                self.proposer.release(req.rid)
            return {}
        drafts: dict[Request, Draft] = {}
        for req, tokens in zip(wanted, proposals, strict=True):
            bitmask = None
            if req.matcher is not None and tokens:
                tokens, bitmask = walk_grammar(req.matcher, tokens, self.vocab_size)
            tokens = tokens[: self._reserve(req, len(tokens))]
            if tokens:
                drafts[req] = Draft(tokens, None if bitmask is None else bitmask[: len(tokens) + 1])
        return drafts

    def _length(self, req: Request) -> DraftLength:
        length = self._lengths.get(req.rid)
        if length is None:
            length = self._lengths[req.rid] = self._history.start(self.config.speculative_num_draft_tokens,
                                                                  not self.config.speculative_disable_adaptive)
        return length

    def _reserve(self, req: Request, n: int) -> int:
        """Pages for the last token and up to n drafts, without preempting; how many drafts fit."""
        if n and not self.kv.ensure_capacity(req, req.kv_len + 1 + n):
            n = max(0, len(req.pages) * self.kv.page_size - req.kv_len - 1)  # what the pages already held cover
        return n

    def settle(self, req: Request, draft: Draft, accepted: int, emitted: int, computed_kept: int) -> None:
        """After the engine appended a verification's tokens: count them, set the KV length, give pages back.

        `computed_kept` is how many draft tokens stayed in the output at the positions the forward computed; the
        request's KV length already covers its last token.
        """
        c = self.counters
        c.verify_steps += 1
        c.proposed_tokens += len(draft.tokens)
        c.accepted_tokens += accepted
        c.emitted_tokens += emitted
        assert req.spec is not None  # tracked when it was added
        req.spec.verify_ct += 1
        req.spec.emitted_tokens += emitted
        self._length(req).record(len(draft.tokens), accepted)
        self._history.record(accepted)
        req.kv_len += computed_kept  # why: valid even when the request just finished; release caches it
        self.kv.trim(req)

    def release(self, req: Request) -> None:
        """Drop a request's speculation state (it finished or was preempted)."""
        self._lengths.pop(req.rid, None)
        self.proposer.release(req.rid)

    def stats(self) -> dict[str, Any]:
        c = self.counters
        return {"spec_algorithm": self.config.speculative_algorithm, "spec_verify_steps": c.verify_steps,
                "spec_proposed_tokens": c.proposed_tokens, "spec_accepted_tokens": c.accepted_tokens,
                "spec_accept_rate": c.acceptance_rate, "spec_accept_length": c.mean_accept_length,
                "spec_proposer_errors": c.proposer_errors}


def walk_grammar(matcher: Any, tokens: list[int], vocab_size: int) -> tuple[list[int], torch.Tensor]:
    """Feed draft tokens to the matcher until one is refused, filling each position's grammar row on the way;
    the matcher ends where it started. Returns the grammar-valid drafts and len(drafts) + 1 bitmask rows."""
    words = (vocab_size + 31) // 32
    bitmask = torch.full((len(tokens) + 1, words), -1, dtype=torch.int32)
    kept = 0
    for tok in tokens:
        matcher.fill_bitmask(bitmask, kept)
        if matcher.is_terminated() or not matcher.accept_token(tok):
            break
        kept += 1
    else:
        matcher.fill_bitmask(bitmask, kept)
    matcher.rollback(kept)
    return tokens[:kept], bitmask

