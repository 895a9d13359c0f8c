"""Draft-model proposals: a second, smaller checkpoint with the target's tokenizer, run greedily in this process.

The draft model has its own KV pool (pages this module owns; the target's pool and radix tree never see them)
and keeps, per request, the tokens whose KV it holds. Each proposal first catches the draft up on the request's
tokens it has not seen (the common prefix with what it holds is kept: rejected drafts and jump-forward rewrites
cost only their own positions), then decodes k tokens for every proposing request together, one batched forward
per draft position. When its pool runs short it forgets the requests that are not proposing now, oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.request import Request
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput
from sprig.runtime.model.tokenizer import Tokenizer


@dataclass
class _DraftState:
    """What the draft pool holds for one request: KV of `tokens`, in `pages`."""

    tokens: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)


class DraftModelProposer:
    """Greedy proposals from the checkpoint at `config.speculative_draft_model_path`."""

    def __init__(self, config: EngineConfig, target_tokenizer: Tokenizer, target_vocab: int, pool_tokens: int) -> None:
        path = config.speculative_draft_model_path
        assert path is not None  # EngineConfig.validate requires it with the draft algorithm
        if Tokenizer(path).hf.get_vocab() != target_tokenizer.hf.get_vocab():
            raise ValueError(f"speculative_draft_model_path {path}: its tokenizer differs from the target model's")
        self.model = load_model(path, config.dtype, None, config.device, config.attention_backend)
        self.pool = KVPool(self.model.cfg, PoolSize(max(1, pool_tokens // config.page_size), config.page_size),
                           self.model.dtype, config.device)
        self.runner = ModelRunner(self.model, self.pool)
        self.vocab = min(target_vocab, self.model.cfg.vocab_size)  # why: a draft id must be a target id
        self.page_size = config.page_size
        self._states: dict[str, _DraftState] = {}  # insertion order = least recently proposing first

    def propose_batch(self, reqs: Sequence[Request], ks: Sequence[int]) -> list[list[int]]:
        """At most ks[i] greedy draft tokens after reqs[i].fill_ids; [] for a request the pool cannot hold."""
        drafts: list[list[int]] = [[] for _ in reqs]
        rows: list[int] = []
        seqs: list[SeqInput] = []
        busy = {r.rid for r in reqs}
        for i, (req, k) in enumerate(zip(reqs, ks, strict=True)):
            state = self._catch_up_state(req)
            if not self._reserve(state, req.num_fill + k - 1, busy):
                self.release(req.rid)
                continue
            new = req.fill_ids[len(state.tokens) :]
            seqs.append(SeqInput(self._as_draft_ids(new), len(state.tokens), state.pages))
            state.tokens.extend(new)
            rows.append(i)
        step = 0
        while seqs:
            picks = self._greedy(self.runner.forward(seqs).logits)
            next_rows, next_seqs = [], []
            for i, tok in zip(rows, picks, strict=True):
                drafts[i].append(tok)
                if step + 1 < ks[i]:  # feed the draft to get the next one
                    state = self._states[reqs[i].rid]
                    next_seqs.append(SeqInput([tok], len(state.tokens), state.pages))
                    state.tokens.append(tok)
                    next_rows.append(i)
            rows, seqs, step = next_rows, next_seqs, step + 1
        return drafts

    def _as_draft_ids(self, ids: list[int]) -> list[int]:
        """Ids the draft model can embed: a target id beyond its vocabulary (padding rows a random target can
        still pick) becomes 0; the drafts after it are only guesses and the target verifies them anyway."""
        limit = self.model.cfg.vocab_size
        return ids if max(ids) < limit else [t if t < limit else 0 for t in ids]

    def _greedy(self, logits: torch.Tensor) -> list[int]:
        return logits[:, : self.vocab].argmax(dim=-1).tolist()

    def _catch_up_state(self, req: Request) -> _DraftState:
        """The request's state, cut to its longest prefix still in the request's tokens (at least one new token)."""
        state = self._states.pop(req.rid, None) or _DraftState()
        self._states[req.rid] = state  # most recently used last
        limit = min(len(state.tokens), req.num_fill - 1)
        keep = 0
        fill = req.fill_ids
        while keep < limit and state.tokens[keep] == fill[keep]:
            keep += 1
        del state.tokens[keep:]
        self._trim(state)
        return state

    def _trim(self, state: _DraftState) -> None:
        keep = -(-len(state.tokens) // self.page_size)
        if len(state.pages) > keep:
            self.pool.free(state.pages[keep:])
            del state.pages[keep:]

    def _reserve(self, state: _DraftState, num_tokens: int, busy: set[str]) -> bool:
        """Pages for `num_tokens` tokens, forgetting idle requests (oldest first) when the pool is short."""
        need = -(-num_tokens // self.page_size) - len(state.pages)
        if need <= 0:
            return True
        for rid in [r for r in self._states if r not in busy]:
            if self.pool.num_free_pages >= need:
                break
            self.release(rid)
        pages = self.pool.alloc(need)
        if pages is None:
            return False
        state.pages.extend(pages)
        return True

    def release(self, rid: str) -> None:
        """Free a request's draft KV."""
        state = self._states.pop(rid, None)
        if state is not None:
            self.pool.free(state.pages)

    @property
    def num_tracked(self) -> int:
        return len(self._states)
