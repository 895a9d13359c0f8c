"""The scheduler over a real KV pool and tree, driven by hand: a request preempted by the plan made beside the
forward that samples its next token (the overlap schedule's `coming` requests) is not resumed by that plan."""

from __future__ import annotations

import torch

from sprig.radix import RadixCache
from sprig.runtime.engine.generate_request import SamplingParams
from sprig.runtime.engine.kv_cache import KVCacheManager
from sprig.runtime.engine.output_text import IncrementalDetokenizer, StopChecker
from sprig.runtime.engine.request import Request, RequestStatus
from sprig.runtime.engine.scheduler import ScheduledSeq, Scheduler, SchedulerConfig
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.tokenizer import Tokenizer


def _scheduler(tokens: int) -> Scheduler:
    cfg = load_model_config(checkpoint_path("tiny-llama"))
    pool = KVPool(cfg, PoolSize(tokens, 1), torch.float32)
    return Scheduler(KVCacheManager(pool, RadixCache(page_size=1)), SchedulerConfig())


def _request(rid: str, prompt: list[int]) -> Request:
    params = SamplingParams.from_dict({"max_new_tokens": 1})  # no future tokens reserved: admission is exact
    tokenizer = Tokenizer(checkpoint_path("tiny-llama")).hf
    return Request(rid, prompt, params, IncrementalDetokenizer(tokenizer, prompt), StopChecker(params))


def _computed(plan: list[ScheduledSeq]) -> None:
    """What the engine does once the plan's forward ran: the planned tokens have KV."""
    for s in plan:
        s.req.kv_len += s.num_tokens


def test_a_request_preempted_while_its_token_is_coming_waits_for_that_token():
    sched = _scheduler(9)
    first, second = _request("first", [5, 6, 7, 8]), _request("second", [9, 10, 11, 12])
    sched.add(first)
    sched.add(second)
    plan = sched.schedule()
    assert [(s.req.rid, s.num_tokens) for s in plan] == [("first", 4), ("second", 4)]
    _computed(plan)
    # Planned beside the forward that samples both next tokens: one free slot, both need one more.
    plan = sched.schedule(coming={first, second})
    assert [(s.req.rid, s.num_tokens) for s in plan] == [("first", 1)]
    assert second.status is RequestStatus.WAITING and sched.num_preemptions == 1
    second.append_output(13)  # the step's sampled tokens, now known
    first.append_output(14)
    assert plan[0].completes_fill
    _computed(plan)
    sched.remove(first)  # it finished: its pages go to the tree
    plan = sched.schedule()  # the token that was coming is known now: resumed, sampling after it
    assert [s.req.rid for s in plan] == ["second"] and plan[0].completes_fill
