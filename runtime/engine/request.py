"""A generation request as the scheduler sees it (its tokens, its KV pages), a validated call's requests
(`PreparedCall`), and its output plumbing.

What the engine hands back per step: deltas, a bounded channel per call, and cumulative results built by the reader.

Each step the engine thread reports, for every updated sequence, only what that step added (`StepDelta`: new
token ids, text and logprobs): O(new) work, whatever the sequence's length. A call's `DeltaChannel` keeps at most
one pending delta per sequence, merging later ones into it while the reader has not taken it, so a reader that
stalls holds O(its unread output) and never one queue entry per step. Readers that want the cumulative result
dict (docs/architecture.md, "The result dict") fold the deltas with a `StreamAccumulator` on their own side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sprig.radix import TreeNode
from sprig.runtime.engine.generate_request import NATIVE_NAMES, FieldNames, LogprobOptions, SamplingParams
from sprig.runtime.engine.output_text import FinishReason, FinishType, IncrementalDetokenizer, StopChecker
from sprig.runtime.engine.penalties import TokenHistory
from sprig.runtime.engine.spec.tally import SpecTally


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


Logprob = tuple[float | None, int, list[tuple[float, int]]]  # (logprob, token id, top (logprob, id) alternatives)


@dataclass(frozen=True)
class LoraRef:
    """A request's LoRA adapter: its name and which load of that name (a reload is another adapter to the cache)."""

    name: str
    uid: int

    def namespace(self, tenant: str) -> str:
        """The radix-cache namespace of a tenant's requests on this adapter: prefixes never cross adapters."""
        return f"{tenant}\x1flora:{self.name}#{self.uid}"


@dataclass(frozen=True)
class Admission:
    """What a request's first admission found cached (reported in its meta_info)."""

    cached_tokens: int  # prompt tokens served from the cache
    host_tokens: int | None  # of those, loaded from the host tier (None: the engine has no tier)


@dataclass(eq=False)
class Request:
    """One sequence being generated. `fill_ids` (prompt + output) is what the KV pool must hold."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    detok: IncrementalDetokenizer
    stop: StopChecker
    logprobs: LogprobOptions = field(default_factory=LogprobOptions)
    namespace: str = ""
    priority: int = 0
    on_update: Callable[[Request, bool], None] | None = None  # (request, finished) after each step
    arrival: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    # KV state: pages cover tokens [0, kv_len); the first cached_len of them belong to the radix tree.
    pages: list[int] = field(default_factory=list)
    kv_len: int = 0
    cached_len: int = 0
    node: TreeNode | None = None
    admission: Admission | None = None  # set by the first admission
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    error: str | None = None
    input_logprobs: list[Logprob] = field(default_factory=list)  # None for the first prompt token
    output_logprobs: list[Logprob] = field(default_factory=list)
    first_token_time: float | None = None
    finish_time: float | None = None
    text_delta: str = ""  # text produced since the last report
    grammar_future: Future | None = None  # compiling constraint; resolved by the caller before submission
    matcher: Any = None  # GrammarMatcher of a constrained request
    thinking: bool = False  # the output starts inside thinking (a constraint and a thinking budget wait for its end)
    penalties: TokenHistory | None = None  # running token counts, when the params ask for penalties
    # How much of the output the caller has been sent (reports carry only what is new).
    reported_ids: int = 0
    reported_output_logprobs: int = 0
    reported_input_logprobs: int = 0
    spec: SpecTally | None = None  # the speculator's figures of this request (None: the engine does not speculate)
    lora: LoraRef | None = None  # its adapter (None: the base model); `namespace` includes it
    lora_slot: int = -1  # the pool slot its adapter sits in while it runs (`LoraManager.pin`)
    lora_held: bool = False  # counted among its adapter's holders (`LoraManager.hold`)
    # The waiting queue's last prefix match: (tree version, fill length, matched tokens).
    prefix_memo: tuple[int, int, int] = (-1, -1, 0)
    fill_ids: list[int] = field(init=False)  # prompt + output as one list, grown by `append_output`

    def __post_init__(self) -> None:
        self.fill_ids = [*self.prompt_ids, *self.output_ids]
        if self.params.has_penalties:
            self.penalties = TokenHistory(self.prompt_ids, self.output_ids)

    def append_output(self, token_id: int, in_fill: bool = False) -> None:
        """Add a generated token (O(1): no list is rebuilt per step); `in_fill` when fill_ids has it already
        (the overlap schedule feeds a sampled token to the next step before its stop checks run)."""
        self.output_ids.append(token_id)
        if not in_fill:
            self.fill_ids.append(token_id)
        if self.penalties is not None:
            self.penalties.add_output(token_id)

    @property
    def num_fill(self) -> int:
        return len(self.fill_ids)

    @property
    def is_prefilling(self) -> bool:
        """More than one token still lacks KV (a decode step computes exactly one)."""
        return self.num_fill - self.kv_len > 1

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the cache at first admission."""
        return self.admission.cached_tokens if self.admission is not None else 0

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def text(self) -> str:
        return self.stop.text

    def finish(self, reason: FinishReason, error: str | None = None) -> None:
        self.finish_reason = reason
        self.error = error
        self.status = RequestStatus.FINISHED
        self.finish_time = time.monotonic()

    def abort(self, error: str | None = None) -> None:
        """Finish with `abort`, keeping the output produced so far."""
        step = self.stop.abort(self.detok)
        self.text_delta += step.delta
        self.finish(FinishReason(FinishType.ABORT), error)


@dataclass(frozen=True)
class PreparedCall:
    """A validated call: its engine requests (n copies of each prompt consecutive), ready to submit."""

    requests: tuple[Request, ...]
    batch: bool
    names: FieldNames = NATIVE_NAMES

    @property
    def prompt_lens(self) -> list[int]:
        return [len(r.prompt_ids) for r in self.requests]


@dataclass(frozen=True)
class SequenceMeta:
    """A sequence's latest scalar meta_info (counts, finish reason, latency): the result dict's `meta_info` without
    the logprobs; `to_dict` gives SGLang's names (docs/architecture.md, "The result dict")."""

    id: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish_reason: FinishReason | None  # None while the sequence runs
    e2e_latency: float
    error: str | None = None  # why the engine aborted it (a device fault, a bug): `finish_reason.message`
    cached_host_tokens: int | None = None  # of `cached_tokens`, loaded from the host tier (None: no tier)
    spec_verify_ct: int | None = None  # speculative decoding: verify forwards (None: the engine does not speculate)
    spec_accept_length: float | None = None  # tokens added per verify forward

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def finish_type(self) -> str | None:
        """"stop", "length" or "abort"; None while the sequence runs."""
        return None if self.finish_reason is None else self.finish_reason.type.value

    @property
    def failure(self) -> str | None:
        """The engine's message when it aborted the sequence for a fault (the server answers 500)."""
        return self.error if self.finish_type == FinishType.ABORT.value else None

    def aborted(self) -> SequenceMeta:
        """The same sequence, finished with `abort` (shutdown ended it)."""
        return dataclasses.replace(self, finish_reason=FinishReason(FinishType.ABORT), error=None)

    def to_dict(self) -> dict[str, Any]:
        finish = None
        if self.finish_reason is not None:
            finish = self.finish_reason.to_dict()
            if self.error:
                finish["message"] = self.error
        out: dict[str, Any] = {"id": self.id, "prompt_tokens": self.prompt_tokens,
                               "completion_tokens": self.completion_tokens, "cached_tokens": self.cached_tokens,
                               "finish_reason": finish, "e2e_latency": self.e2e_latency}
        if self.cached_host_tokens is not None:
            host = self.cached_host_tokens
            out["cached_tokens_details"] = {"device": self.cached_tokens - host, "host": host}
        if self.spec_verify_ct is not None:
            out["spec_verify_ct"] = self.spec_verify_ct
            out["spec_accept_length"] = self.spec_accept_length
        return out


EMPTY_META = SequenceMeta(None, 0, 0, 0, None, 0.0)  # a sequence that has not reported yet


@dataclass
class StepDelta:
    """What one or more steps added to sequence `index` of a call since its reader last looked."""

    index: int
    ids: list[int]
    text: list[str]  # pieces, joined by the reader: merging stays O(1) per step
    output_logprobs: list[Logprob]
    input_logprobs: list[Logprob]
    meta: SequenceMeta  # the latest
    finished: bool

    def merge(self, later: StepDelta) -> None:
        """Append a later delta of the same sequence."""
        self.ids += later.ids
        self.text += later.text
        self.output_logprobs += later.output_logprobs
        self.input_logprobs += later.input_logprobs
        self.meta = later.meta
        self.finished = later.finished

    @property
    def num_items(self) -> int:
        """Token ids, text pieces and logprob entries held: what a stalled reader costs."""
        return len(self.ids) + len(self.text) + len(self.output_logprobs) + len(self.input_logprobs)


def take_delta(req: Request, index: int, finished: bool) -> StepDelta:
    """The part of `req`'s output not reported yet, as a delta (engine thread; O(new))."""
    ids = req.output_ids[req.reported_ids:]
    req.reported_ids = len(req.output_ids)
    text = [req.text_delta] if req.text_delta else []
    req.text_delta = ""
    out_lp: list[Logprob] = []
    in_lp: list[Logprob] = []
    if req.logprobs.return_logprob:
        out_lp = req.output_logprobs[req.reported_output_logprobs:]
        in_lp = req.input_logprobs[req.reported_input_logprobs:]
        req.reported_output_logprobs = len(req.output_logprobs)
        req.reported_input_logprobs = len(req.input_logprobs)
    return StepDelta(index, ids, text, out_lp, in_lp, _meta(req, finished), finished)


def _meta(req: Request, finished: bool) -> SequenceMeta:
    reason = req.finish_reason if finished else None
    end = req.finish_time or time.monotonic()
    host = req.admission.host_tokens if req.admission is not None else None
    spec = req.spec  # SGLang's names: verify forwards, and tokens added per verify forward
    return SequenceMeta(req.rid, len(req.prompt_ids), len(req.output_ids), req.cached_tokens, reason,
                        end - req.arrival, req.error if reason is not None else None, host,
                        spec.verify_ct if spec else None, spec.accept_length if spec else None)


class LoopWaker:
    """Wakes an event loop's readers from the engine thread: one `call_soon_threadsafe` for every reader that
    became ready before the loop ran it, not one per reader.

    A step that reports to 1,000 streams costs the engine thread one self-pipe write instead of 1,000 (each a
    GIL release it must win back from the busy event loop), and the loop one callback.
    """

    _of_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = weakref.WeakKeyDictionary()
    _of_loop_lock = threading.Lock()

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopWaker:
        """The one waker of `loop`, made on first use (every engine's readers on that loop share it)."""
        with cls._of_loop_lock:
            waker = cls._of_loop.get(loop)
            if waker is None:
                waker = cls._of_loop[loop] = cls(loop)
            return waker

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._ready: list[asyncio.Event] = []
        self._scheduled = False

    def wake(self, event: asyncio.Event) -> None:
        """Set `event` on the loop soon; raises ConnectionError when the loop is closed."""
        with self._lock:
            self._ready.append(event)
            if self._scheduled:
                return  # a wake-up is on its way and will set this one too
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._fire)
        except RuntimeError:  # the loop was closed: nobody will read this output
            with self._lock:
                self._scheduled = False
                self._ready.clear()
            raise ConnectionError("the caller's event loop is closed") from None

    def _fire(self) -> None:
        with self._lock:
            ready, self._ready, self._scheduled = self._ready, [], False
        for event in ready:
            event.set()


class DeltaChannel:
    """The engine → caller channel of one call (a thread, or an asyncio loop through its `LoopWaker`, reads it).

    `put` (engine thread) merges into the sequence's pending delta and wakes the reader once per batch of
    puts; `take_nowait` hands over everything pending. Memory is bounded by the unread output, not by the
    number of steps the reader missed.
    """

    def __init__(self, waker: LoopWaker | None) -> None:
        self.waker = waker
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pending: dict[int, StepDelta] = {}
        self._signalled = False
        self._ready = asyncio.Event() if waker is not None else None

    def put(self, delta: StepDelta) -> None:
        """Hand a delta over; raises ConnectionError when the reader's event loop is gone."""
        with self._lock:
            pending = self._pending.get(delta.index)
            if pending is None:
                self._pending[delta.index] = delta
            else:
                pending.merge(delta)
            if self._signalled:
                return  # the reader has a wake-up on its way and will take this too
            self._signalled = True
            if self.waker is None:
                self._cond.notify()
                return
        assert self._ready is not None
        self.waker.wake(self._ready)

    def take_nowait(self) -> list[StepDelta]:
        """Everything pending, in sequence order (empty when nothing is)."""
        with self._lock:
            return self._take_locked()

    def _take_locked(self) -> list[StepDelta]:
        out = [self._pending[i] for i in sorted(self._pending)]
        self._pending.clear()
        self._signalled = False
        return out

    def take(self, timeout: float) -> list[StepDelta]:
        """Block (a thread reader) until something is pending or `timeout` passes."""
        with self._cond:
            if not self._pending:
                self._cond.wait(timeout)
            return self._take_locked()

    async def take_async(self) -> list[StepDelta]:
        """Wait (an asyncio reader, on `loop`) until something is pending, then take it."""
        assert self._ready is not None
        while True:
            await self._ready.wait()
            self._ready.clear()  # before taking: a put after the take schedules a fresh set()
            out = self.take_nowait()
            if out:
                return out

    @property
    def pending_items(self) -> int:
        """Ids, text pieces and logprob entries waiting for the reader."""
        with self._lock:
            return sum(d.num_items for d in self._pending.values())

    @property
    def pending_deltas(self) -> int:
        with self._lock:
            return len(self._pending)


@dataclass
class _Sequence:
    """One sequence's output so far, kept in the result dict's own shapes so a result is a few list copies."""

    text: str = ""
    ids: list[int] = field(default_factory=list)
    input_pairs: list[tuple[float | None, int]] = field(default_factory=list)
    output_pairs: list[tuple[float | None, int]] = field(default_factory=list)
    input_top: list[list[tuple[float, int]]] = field(default_factory=list)
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)
    meta: SequenceMeta = EMPTY_META


class StreamAccumulator:
    """Folds a call's deltas into cumulative result dicts (the reader's side).

    Each delta is converted once, when applied; a result then copies lists of references (no per-token objects
    are built again), which keeps a long stream's reader cheap and its garbage small.
    """

    def __init__(self, num_sequences: int, logprobs: bool, top_logprobs: bool) -> None:
        self._seqs = [_Sequence() for _ in range(num_sequences)]
        self._logprobs = logprobs
        self._top = top_logprobs

    def apply(self, delta: StepDelta) -> None:
        seq = self._seqs[delta.index]
        seq.text += "".join(delta.text)
        seq.ids += delta.ids
        seq.meta = delta.meta
        if self._logprobs:
            seq.input_pairs += [(lp, tok) for lp, tok, _ in delta.input_logprobs]
            seq.output_pairs += [(lp, tok) for lp, tok, _ in delta.output_logprobs]
            if self._top:
                seq.input_top += [top for _, _, top in delta.input_logprobs]
                seq.output_top += [top for _, _, top in delta.output_logprobs]

    def result(self, index: int) -> dict[str, Any]:
        """The result dict of sequence `index` so far (fresh lists: the caller may keep it)."""
        seq = self._seqs[index]
        meta = seq.meta.to_dict()
        if self._logprobs:
            meta["input_token_logprobs"] = list(seq.input_pairs)
            meta["output_token_logprobs"] = list(seq.output_pairs)
            if self._top:
                meta["input_top_logprobs"] = list(seq.input_top)
                meta["output_top_logprobs"] = list(seq.output_top)
        return {"text": seq.text, "output_ids": list(seq.ids), "meta_info": meta}
