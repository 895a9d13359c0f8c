"""Continuous batching: which requests run in the next step, with how many tokens each.

Each step runs every decoding request (one token each) plus prefill chunks under a token budget. Waiting
requests are admitted against free + evictable KV with a reserve for the running requests' future tokens, in
priority order, then longest cached prefix first (arrival order when the queue is long). When decode runs out of
pages the newest running requests are preempted: their KV is released (cached in the tree where possible, or
swapped to the host tier), their tokens kept, and they are resumed later from the waiting queue.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np

from sprig.radix import RadixCache
from sprig.runtime.engine.kv_cache import KVCacheManager
from sprig.runtime.engine.request import Admission, Request, RequestStatus

logger = logging.getLogger(__name__)

LPM_QUEUE_LIMIT = 128  # beyond this many waiting requests, prefix matching them all costs more than it saves
INBATCH_SHARE_MIN = 32  # defer a request sharing this many uncached tokens with one admitted this step
RESERVE_CLIP = 4096  # future tokens counted per request at most


class SchedulePolicy(str, Enum):
    LPM = "lpm"  # longest cached prefix first
    FCFS = "fcfs"


@dataclass(frozen=True)
class SchedulerConfig:
    max_running_requests: int = 256
    chunked_prefill_size: int = 512
    policy: SchedulePolicy = SchedulePolicy.LPM
    mixed_chunk: bool = True  # prefill chunks ride along with decode steps; False alternates the two
    init_new_token_ratio: float = 0.7
    min_new_token_ratio: float = 0.15
    new_token_ratio_decay: float = 0.002


@dataclass(frozen=True)
class ScheduledSeq:
    req: Request
    num_tokens: int  # compute KV for fill_ids[kv_len : kv_len + num_tokens]

    @property
    def completes_fill(self) -> bool:
        """This step computes the request's last known token, so the step samples its next one."""
        return self.req.kv_len + self.num_tokens == self.req.num_fill


class AdapterSlots(Protocol):
    """The LoRA adapter pool's gate (`lora_manager.LoraManager`): a running request pins its adapter's slot."""

    def pin(self, req: Request) -> bool: ...

    def unpin(self, req: Request) -> None: ...


class Scheduler:
    def __init__(self, kv: KVCacheManager, config: SchedulerConfig, adapters: AdapterSlots | None = None) -> None:
        self.kv = kv
        self.config = config
        self.adapters = adapters
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.new_token_ratio = config.init_new_token_ratio
        self.num_preemptions = 0
        self._last_step_prefilled = False

    # --- queue -----------------------------------------------------------------------------------------
    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, req: Request) -> None:
        """Take a finished or aborted request out and give back its KV."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._unpin(req)
        self.kv.release(req, cache=req.kv_len > 0)

    # --- one step --------------------------------------------------------------------------------------
    def schedule(self, exclude: AbstractSet[Request] = frozenset(), limit: int | None = None,
                 coming: AbstractSet[Request] = frozenset()) -> list[ScheduledSeq]:
        """The next step's sequences. `exclude`: running requests with a step in flight (pipeline parallelism):
        they are neither scheduled, preempted nor counted out of the batch; `limit`: sequences in the step at most;
        `coming`: requests whose next token the step in flight is sampling (the overlap schedule plans beside it):
        one this plan preempts is not resumed by it. The defaults schedule every request (a plain engine)."""
        cap = self.config.max_running_requests if limit is None else limit
        alternate = not self.config.mixed_chunk
        decode_turn = alternate and self._last_step_prefilled
        plan = self._schedule_decodes(exclude, cap) if not alternate or decode_turn else []
        if decode_turn and plan:
            self._last_step_prefilled = False
            return plan
        budget = self.config.chunked_prefill_size
        for req in [r for r in self.running if r.is_prefilling and r not in exclude]:
            if budget <= 0 or len(plan) >= cap:
                break
            n = min(req.num_fill - req.kv_len, budget)
            if self.kv.ensure_capacity(req, req.kv_len + n):
                plan.append(ScheduledSeq(req, n))
                budget -= n
        if budget > 0 and len(plan) < cap:
            plan.extend(self._admit(budget, cap - len(plan), coming))
        self._last_step_prefilled = any(s.num_tokens > 1 or not s.req.output_ids for s in plan)
        if alternate and not plan:
            plan = self._schedule_decodes(exclude, cap)  # nothing to prefill: decode now rather than idle a step
        self.new_token_ratio = max(
            self.config.min_new_token_ratio, self.new_token_ratio - self.config.new_token_ratio_decay
        )
        return plan

    def _schedule_decodes(self, exclude: AbstractSet[Request], cap: int) -> list[ScheduledSeq]:
        plan: list[ScheduledSeq] = []
        for req in [r for r in self.running if not r.is_prefilling and r not in exclude]:
            if len(plan) >= cap:
                break
            if req.status is RequestStatus.RUNNING and self._make_room(req, exclude):
                plan.append(ScheduledSeq(req, 1))
        return plan

    def _make_room(self, req: Request, exclude: AbstractSet[Request]) -> bool:
        """Give req a page for its next token, preempting the newest requests without a step in flight; False
        when req itself was preempted, or when every other request has a step in flight (it waits for them)."""
        while not self.kv.ensure_capacity(req, req.kv_len + 1):
            victim = next((r for r in reversed(self.running) if r not in exclude), None)
            if victim is None:
                return False
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request) -> None:
        """Retract a running request: free its KV (cached or swapped where possible) and queue it to resume first."""
        self.running.remove(req)
        self._unpin(req)
        mode = self.kv.preempt(req)
        req.status = RequestStatus.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        self.new_token_ratio = self.config.init_new_token_ratio
        logger.debug("preempted %s after %d output tokens (%s)", req.rid, len(req.output_ids), mode.value)

    def _unpin(self, req: Request) -> None:
        if self.adapters is not None:
            self.adapters.unpin(req)

    # --- admission -------------------------------------------------------------------------------------
    def _future_tokens(self, req: Request) -> int:
        left = max(req.params.max_new_tokens - len(req.output_ids), 0)
        return int(min(left, RESERVE_CLIP) * self.new_token_ratio)

    def _match_limit(self, req: Request) -> int:
        limit = req.num_fill - 1  # the last token is always computed: its logits pick the next token
        if req.logprobs.return_logprob and 0 <= req.logprobs.logprob_start_len < len(req.prompt_ids):
            limit = min(limit, max(req.logprobs.logprob_start_len - 1, 0))  # those logits must be computed
        return limit

    def _ordered_waiting(self) -> list[Request]:
        reqs = list(self.waiting)
        if self.config.policy is SchedulePolicy.LPM and len(reqs) <= LPM_QUEUE_LIMIT:
            reqs.sort(key=lambda r: (-r.priority, -self._cached_prefix_len(r), r.arrival))
        else:
            reqs.sort(key=lambda r: (-r.priority, r.arrival))
        return reqs

    def _cached_prefix_len(self, req: Request) -> int:
        """How much of a waiting request the tree holds; matched again only when the tree or the request changed."""
        tree = self.kv.tree
        version, fill, matched = req.prefix_memo
        if version != tree.version or fill != req.num_fill:
            result = tree.match_prefix(req.fill_ids[: self._match_limit(req)], namespace=req.namespace)
            matched = len(result.slots) + result.host_len  # a host hit is loaded at admission: nearly as good
            req.prefix_memo = (tree.version, req.num_fill, matched)
        return matched

    def _admit(self, budget: int, room: int, coming: AbstractSet[Request]) -> list[ScheduledSeq]:
        plan: list[ScheduledSeq] = []
        reserved = sum(self._future_tokens(r) for r in self.running)
        in_batch = RadixCache(page_size=1)  # uncached prompts admitted this step, to spot shared prefixes
        for req in self._ordered_waiting():
            if budget <= 0 or len(self.running) >= self.config.max_running_requests or len(plan) >= room:
                break
            if req in coming:
                continue  # preempted while its step was in flight: its last token is not known yet
            if self.adapters is not None and not self.adapters.pin(req):
                continue  # every adapter slot is pinned by running requests of other adapters
            hit = self.kv.match(req, self._match_limit(req))
            uncached = req.fill_ids[req.kv_len :]
            if len(in_batch.match_prefix(uncached, namespace=req.namespace).slots) >= INBATCH_SHARE_MIN:
                self._unpin(req)
                self.kv.release(req, cache=False)  # next step it will find that prefix in the tree
                continue
            need = len(uncached) + self._future_tokens(req)
            n = min(len(uncached), budget)
            if need > self.kv.available_tokens - reserved or not self.kv.ensure_capacity(req, req.kv_len + n):
                self._unpin(req)
                self.kv.release(req, cache=False)
                break
            in_batch.insert(uncached, np.zeros(len(uncached), dtype=np.int64), namespace=req.namespace)
            reserved += self._future_tokens(req)
            self.waiting.remove(req)
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            self.kv.count_hit(hit)
            if req.admission is None:
                req.admission = Admission(req.kv_len, hit.host if self.kv.host is not None else None)
            plan.append(ScheduledSeq(req, n))
            budget -= n
        return plan

