"""`sprig.Engine`: the thread-safe front of the engine core, with sync, async and streaming generation.

A background thread runs the core's step loop. Callers on any thread or asyncio loop submit requests through an
inbox; each request reports back through its own queue, so callers never touch engine state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sprig.grammar.matcher import GrammarMatcher
from sprig.runtime.constraints import compiled_or_error, spec_from_params
from sprig.runtime.detokenizer import IncrementalDetokenizer
from sprig.runtime.engine_config import EngineConfig
from sprig.runtime.engine_core import EngineCore
from sprig.runtime.errors import RequestError
from sprig.runtime.request import LogprobOptions, Request
from sprig.runtime.sampling_params import SamplingParams
from sprig.runtime.stop_checker import StopChecker

logger = logging.getLogger(__name__)

MAX_BATCH_PROMPTS = 4096


@dataclass(frozen=True)
class _Event:
    index: int
    result: dict[str, Any]
    finished: bool


class _Sink:
    """Delivers a request's snapshots to the caller's thread queue or asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.queue: queue.Queue[_Event] | asyncio.Queue[_Event] = asyncio.Queue() if loop else queue.Queue()

    def put(self, event: _Event) -> None:
        """Hand an event over; raises ConnectionError when the caller's event loop is gone."""
        if self.loop is None:
            self.queue.put(event)
            return
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop was closed: nobody will read this request's output
            raise ConnectionError("the caller's event loop is closed") from None


def result_of(req: Request, finished: bool) -> dict[str, Any]:
    """The DESIGN.md result dict for a request's current state (cumulative text)."""
    text = req.extra.get("text", "") + req.text_delta
    req.extra["text"] = text
    req.text_delta = ""
    finish = None
    if finished and req.finish_reason is not None:
        finish = req.finish_reason.to_dict()
        if req.error:
            finish["message"] = req.error
    end = req.finish_time or time.monotonic()
    meta: dict[str, Any] = {
        "id": req.rid,
        "prompt_tokens": len(req.prompt_ids),
        "completion_tokens": len(req.output_ids),
        "cached_tokens": req.cached_tokens,
        "finish_reason": finish,
        "e2e_latency": end - req.arrival,
    }
    if req.logprobs.return_logprob:
        meta["input_token_logprobs"] = [(lp, tok) for lp, tok, _ in req.input_logprobs]
        meta["output_token_logprobs"] = [(lp, tok) for lp, tok, _ in req.output_logprobs]
        if req.logprobs.top_logprobs_num > 0:
            meta["input_top_logprobs"] = [top for _, _, top in req.input_logprobs]
            meta["output_top_logprobs"] = [top for _, _, top in req.output_logprobs]
    return {"text": text, "output_ids": list(req.output_ids), "meta_info": meta}


class Engine:
    """An LLM engine over one checkpoint folder (`None`: the built-in demo model). See DESIGN.md."""

    def __init__(self, model_path: str | None = None, **options: Any) -> None:
        self.config = EngineConfig.from_options(model_path, options)
        self.core = EngineCore(self.config)
        self.tokenizer = self.core.tokenizer
        self.model_config = self.core.model_config
        self._inbox: deque[Callable[[], None]] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self._ids = itertools.count()
        self.loop_error: str | None = None
        self.last_heartbeat = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="sprig-engine", daemon=True)
        self._thread.start()

    # --- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Abort whatever is in flight and stop the loop thread."""
        if self._stopping:
            return
        with contextlib.suppress(RuntimeError):  # why: the loop may be dying on its own (it aborts everything then)
            self._call(lambda: self.core.abort_all("engine shut down"))
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(timeout=30)
        self.core.grammar.shutdown()
        self.core.shutdown()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self.loop_error is None

    def _loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._inbox and not self.core.has_work() and not self._stopping:
                        self.last_heartbeat = time.monotonic()
                        self._cv.wait(timeout=1.0)
                    ops = list(self._inbox)
                    self._inbox.clear()
                    if self._stopping and not ops:
                        return
                for op in ops:
                    op()
                updated = self.core.step()
                self.core.notify(updated)
                self.last_heartbeat = time.monotonic()
        except BaseException as e:  # a device fault or bug: fail every request loudly, never hang them
            logger.exception("engine loop died")
            self.loop_error = f"{type(e).__name__}: {e}"
            self.core.abort_all(f"engine failure: {type(e).__name__}")

    def _post(self, op: Callable[[], None]) -> None:
        if not self.is_alive:
            raise RuntimeError(f"the engine is not running ({self.loop_error or 'shut down'})")
        with self._cv:
            self._inbox.append(op)
            self._cv.notify()

    def _call(self, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
        """Run fn on the loop thread and return its result."""
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            return fn()
        done: queue.Queue[tuple[bool, Any]] = queue.Queue()

        def op() -> None:
            try:
                done.put((True, fn()))
            except Exception as e:  # noqa: BLE001 - handed back to the caller
                done.put((False, e))

        self._post(op)
        ok, value = done.get(timeout=timeout)
        if not ok:
            raise value
        return value

    # --- requests --------------------------------------------------------------------------------------
    def _prompt_ids(self, prompt: str | None, ids: list[int] | None) -> list[int]:
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise RequestError("input_ids must be a list of integers", param="input_ids")
            bad = [t for t in ids if not 0 <= t < self.core.vocab_size]
            if bad:
                raise RequestError(f"input_ids contains token id {bad[0]} outside [0, {self.core.vocab_size})",
                                   param="input_ids", code="invalid_token_id")
            result = list(ids)
        elif isinstance(prompt, str):
            result = self.tokenizer.encode(prompt)
        else:
            raise RequestError("prompt must be a string", param="prompt")
        if not result:
            raise RequestError("the prompt is empty", param="prompt" if ids is None else "input_ids")
        return result

    def check_lengths(self, prompt_len: int, params: SamplingParams) -> None:
        """Refuse at once what could never run: too long for the context or for the whole KV pool."""
        ctx = self.core.context_length
        if prompt_len >= ctx:
            raise RequestError(f"the prompt has {prompt_len} tokens; this model's context length is {ctx}",
                               param="prompt", code="context_length_exceeded")
        if prompt_len + params.max_new_tokens > ctx:
            raise RequestError(
                f"prompt ({prompt_len} tokens) + max_new_tokens ({params.max_new_tokens}) exceeds the context "
                f"length {ctx}", param="max_new_tokens", code="context_length_exceeded")
        pool = self.core.kv.total_tokens
        if prompt_len + params.max_new_tokens > pool:
            raise RequestError(
                f"prompt ({prompt_len}) + max_new_tokens ({params.max_new_tokens}) needs more KV than the "
                f"whole pool ({pool} tokens)", param="max_new_tokens", code="context_length_exceeded")

    def make_requests(
        self,
        prompt: str | list[str] | None = None,
        sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
        input_ids: list[int] | list[list[int]] | None = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        namespace: str = "",
        priority: int = 0,
        rid: str | None = None,
    ) -> tuple[list[Request], bool]:
        """Validate and build every request of a call (nothing is submitted if any is invalid).

        Returns the requests (n copies of each prompt are consecutive) and whether the call was a batch.
        """
        if (prompt is None) == (input_ids is None):
            raise RequestError("give exactly one of prompt and input_ids", param="prompt")
        batch = isinstance(prompt, list) if prompt is not None else bool(input_ids) and isinstance(input_ids[0], list)
        prompts: list[Any] = (prompt if batch else [prompt]) if prompt is not None else []
        id_lists: list[Any] = (input_ids if batch else [input_ids]) if input_ids is not None else []
        count = len(prompts) or len(id_lists)
        if count == 0:
            raise RequestError("the prompt list is empty", param="prompt")
        if count > MAX_BATCH_PROMPTS:
            raise RequestError(f"at most {MAX_BATCH_PROMPTS} prompts per call", param="prompt")
        params_list = sampling_params if isinstance(sampling_params, list) else [sampling_params] * count
        if len(params_list) != count:
            raise RequestError("sampling_params must be one dict or one per prompt", param="sampling_params")
        if not isinstance(top_logprobs_num, int) or not 0 <= top_logprobs_num <= 20:
            raise RequestError("top_logprobs_num must be an integer in [0, 20]", param="top_logprobs_num")
        if not isinstance(logprob_start_len, int) or logprob_start_len < -1:
            raise RequestError("logprob_start_len must be an integer >= -1", param="logprob_start_len")
        lp = LogprobOptions(bool(return_logprob), logprob_start_len, top_logprobs_num)
        reqs: list[Request] = []
        call_id = rid or uuid.uuid4().hex[:16]
        for i in range(count):
            ids = self._prompt_ids(prompts[i] if prompts else None, id_lists[i] if id_lists else None)
            params = SamplingParams.from_dict(params_list[i]).validate(self.core.vocab_size,
                                                                       max_n=self.config.max_n)
            self.check_lengths(len(ids), params)
            spec = spec_from_params(params)
            grammar = self.core.grammar.submit(spec) if spec is not None else None
            base = f"{call_id}-{i}" if count > 1 else rid
            for k in range(params.n):
                reqs.append(self._request(ids, params, k, lp, namespace, priority, base, grammar))
        return reqs, batch

    def _request(self, ids: list[int], params: SamplingParams, k: int, lp: LogprobOptions, namespace: str,
                 priority: int, base: str | None, grammar: Future | None) -> Request:
        if params.n > 1 and params.seed is not None:
            params = SamplingParams.from_dict({**params.to_dict(), "seed": (params.seed + k) % (2**63)})
        rid = base or uuid.uuid4().hex
        if params.n > 1:
            rid = f"{rid}-{k}"
        return Request(
            rid=rid, prompt_ids=ids, params=params,
            detok=IncrementalDetokenizer(self.tokenizer.hf, ids, params.skip_special_tokens,
                                         params.spaces_between_special_tokens),
            stop=StopChecker(params, self.core.eos_token_ids),
            logprobs=lp, namespace=namespace, priority=priority, grammar_future=grammar,
        )

    @staticmethod
    def _attach_matchers(reqs: list[Request]) -> None:
        """Give constrained requests their matchers (compilation finished; errors raise RequestError)."""
        for req in reqs:
            if req.grammar_future is not None:
                req.matcher = GrammarMatcher(compiled_or_error(req.grammar_future))
                req.grammar_future = None

    def _submit(self, reqs: list[Request], loop: asyncio.AbstractEventLoop | None, stream: bool) -> _Sink:
        self._attach_matchers(reqs)
        sink = _Sink(loop)
        for index, req in enumerate(reqs):
            req.on_update = _reporter(sink, index, stream)
        if len(self.core.scheduler.waiting) + len(reqs) > self.config.max_queued_requests:
            raise RequestError("too many queued requests", code="queue_full")
        self._post(lambda: [self.core.add_request(r) for r in reqs])
        return sink

    # --- public API ------------------------------------------------------------------------------------
    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob: bool = False,
                 logprob_start_len: int = -1, top_logprobs_num: int = 0, stream: bool = False, **extra: Any):
        """Generate for one prompt (→ dict) or a list (→ list); `stream=True` → iterator of cumulative dicts."""
        reqs, batch = self.make_requests(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                         top_logprobs_num, **extra)
        sink = self._submit(reqs, None, stream)
        if stream:
            return self._stream(sink, reqs)
        results = self._wait(sink, reqs)
        return results if batch or len(results) > 1 else results[0]

    def _wait(self, sink: _Sink, reqs: list[Request]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{}] * len(reqs)
        pending = len(reqs)
        try:
            while pending:
                ev = self._next_event(sink)
                if ev.finished:
                    results[ev.index] = ev.result
                    pending -= 1
        except BaseException:
            for r in reqs:
                self.abort(r.rid)  # the caller gave up (KeyboardInterrupt, ...): free the requests
            raise
        return results

    def _next_event(self, sink: _Sink) -> _Event:
        while True:
            try:
                return sink.queue.get(timeout=1.0)
            except queue.Empty:
                if not self.is_alive:
                    raise RuntimeError(f"the engine stopped: {self.loop_error or 'shut down'}") from None

    def _stream(self, sink: _Sink, reqs: list[Request]) -> Iterator[dict[str, Any]]:
        pending = len(reqs)
        try:
            while pending:
                ev = self._next_event(sink)
                pending -= ev.finished
                yield {**ev.result, "index": ev.index} if len(reqs) > 1 else ev.result
        finally:
            if pending:
                for r in reqs:
                    self.abort(r.rid)  # the consumer stopped iterating: free the requests

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob: bool = False,
                             logprob_start_len: int = -1, top_logprobs_num: int = 0, stream: bool = False,
                             **extra: Any):
        """Like `generate`, awaitable; `stream=True` returns an async iterator of cumulative dicts."""
        reqs, batch = self.make_requests(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                         top_logprobs_num, **extra)
        for fut in {id(r.grammar_future): r.grammar_future for r in reqs if r.grammar_future}.values():
            with contextlib.suppress(Exception):  # errors are raised by _submit, on the same future
                await asyncio.wrap_future(fut)  # compile without blocking the caller's event loop
        sink = self._submit(reqs, asyncio.get_running_loop(), stream)
        if stream:
            return self._astream(sink, reqs)
        results: list[dict[str, Any] | None] = [None] * len(reqs)
        pending = len(reqs)
        try:
            while pending:
                ev = await sink.queue.get()
                if ev.finished:
                    results[ev.index] = ev.result
                    pending -= 1
        finally:
            if pending:
                for r in reqs:
                    self.abort(r.rid)
        return results if batch or len(results) > 1 else results[0]

    async def _astream(self, sink: _Sink, reqs: list[Request]) -> AsyncIterator[dict[str, Any]]:
        pending = len(reqs)
        try:
            while pending:
                ev = await sink.queue.get()
                pending -= ev.finished
                yield {**ev.result, "index": ev.index} if len(reqs) > 1 else ev.result
        finally:
            if pending:
                for r in reqs:
                    self.abort(r.rid)

    def abort(self, rid: str) -> None:
        """Abort a request by id (idempotent; unknown ids are ignored)."""
        if self.is_alive:
            self._post(lambda: self.core.abort(rid))

    def flush_cache(self) -> bool:
        """Empty the prefix cache; False while requests are running."""
        return bool(self._call(self.core.flush_cache))

    def stats(self) -> dict[str, Any]:
        """A snapshot of load, KV usage, cache figures and step timings."""
        return self._call(self._stats)

    def _stats(self) -> dict[str, Any]:
        core, c = self.core, self.core.counters
        kv = core.kv
        total = kv.total_tokens
        used = total - core.pool.num_free_tokens
        decode_steps = max(c.decode_steps, 1)
        return {
            "running": len(core.scheduler.running),
            "waiting": len(core.scheduler.waiting),
            "kv_total_tokens": total,
            "kv_used_tokens": used,
            "kv_usage": used / total if total else 0.0,
            "kv_free_tokens": core.pool.num_free_tokens,
            "cache_evictable_tokens": core.tree.evictable_size,
            "cache_protected_tokens": core.tree.protected_size,
            "cached_tokens": c.cached_tokens,
            "prompt_tokens": c.prompt_tokens,
            "cache_hit_rate": c.cached_tokens / c.prompt_tokens if c.prompt_tokens else 0.0,
            "generated_tokens": c.generated_tokens,
            "computed_tokens": c.computed_tokens,
            "num_preemptions": core.scheduler.num_preemptions,
            "finished_requests": c.finished_requests,
            "aborted_requests": c.aborted_requests,
            "request_errors": c.request_errors,
            "steps": c.steps,
            "tokens_per_step": (sum(c.recent_step_tokens) / len(c.recent_step_tokens)) if c.recent_step_tokens
            else 0.0,
            "avg_decode_batch": c.decode_batch_tokens / decode_steps,
            "model_time_s": c.model_time,
            "step_time_s": c.step_time,
            "context_length": core.context_length,
            "page_size": core.pool.page_size,
            "jump_forward_tokens": c.jump_forward_tokens,
            "grammar": core.grammar.stats(),
        }


def _reporter(sink: _Sink, index: int, stream: bool) -> Callable[[Request, bool], None]:
    def report(req: Request, finished: bool) -> None:
        if not (stream or finished):
            return  # non-streaming callers only want the final result
        sink.put(_Event(index, result_of(req, finished), finished))

    return report
