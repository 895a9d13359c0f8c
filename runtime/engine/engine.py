"""`sprig.Engine`: the thread-safe front of the engine core, with sync, async and streaming generation.

A background thread runs the core's step loop. Callers on any thread or asyncio loop submit requests through an
inbox; each call's requests report back through its own bounded `DeltaChannel` (request.py), so callers never
touch engine state. The engine sends deltas; the streams here build the cumulative dicts on the caller's side.
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
from typing import Any

from sprig.grammar.factory import matcher_for
from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.constraints import compiled_or_error, spec_from_params
from sprig.runtime.engine.core import EngineCore
from sprig.runtime.engine.detokenizer import IncrementalDetokenizer
from sprig.runtime.engine.request import (
    DeltaChannel,
    LogprobOptions,
    Request,
    StepDelta,
    StreamAccumulator,
    take_delta,
)
from sprig.runtime.engine.sampling_params import SamplingParams
from sprig.runtime.engine.stop_checker import StopChecker
from sprig.runtime.engine.summary import engine_stats
from sprig.runtime.errors import RequestError

logger = logging.getLogger(__name__)

MAX_BATCH_PROMPTS = 4096
MAX_PRIORITY = 2**31 - 1  # SGLang's int32 range; larger values would only reorder the same way


class Engine:
    """An LLM engine over one checkpoint folder or GGUF file (`None`: SmolLM2-135M-Instruct, the default model;
    `"demo"`: the built-in random-weight demo model); see docs/architecture.md."""

    def __init__(self, model_path: str | None = None, **options: Any) -> None:
        self.config = EngineConfig.from_options(model_path, options)
        self._inbox: deque[Callable[[], None]] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self._ids = itertools.count()
        self.loop_error: str | None = None
        self.last_heartbeat = time.monotonic()
        built: Future[EngineCore] = Future()
        # The loop thread builds the core too: it is then the process's only OpenMP master. A second thread's
        # pool of workers makes libgomp count more threads than cores, and it then stops spinning between parallel
        # regions (every kernel wakes its workers through the OS): measured 2x slower decode on two cores.
        self._thread = threading.Thread(target=self._build_and_loop, args=(built,), name="sprig-engine",
                                        daemon=True)
        self._thread.start()
        self.core = built.result()  # re-raises a load error (a CheckpointError) here, in the caller's thread
        self.tokenizer = self.core.tokenizer
        self.model_config = self.core.model_config

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

    def _build_and_loop(self, built: Future[EngineCore]) -> None:
        try:
            self.core = EngineCore(self.config)
        except BaseException as e:  # handed to the constructor, which raises it
            built.set_exception(e)
            return
        built.set_result(self.core)
        self._loop()

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
        A higher `priority` is admitted first (the scheduler's order; equal priorities keep its usual order).
        """
        if (prompt is None) == (input_ids is None):
            raise RequestError("give exactly one of prompt and input_ids", param="prompt")
        prompts: list[Any] = []
        id_lists: list[Any] = []
        if prompt is not None:
            batch = isinstance(prompt, list)
            prompts = list(prompt) if isinstance(prompt, list) else [prompt]
        else:
            assert input_ids is not None
            batch = bool(input_ids) and isinstance(input_ids[0], list)
            id_lists = list(input_ids) if batch else [input_ids]
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
        if isinstance(priority, bool) or not isinstance(priority, int) or not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
            raise RequestError(f"priority must be an integer in [-{MAX_PRIORITY}, {MAX_PRIORITY}]", param="priority")
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
                req.matcher = matcher_for(compiled_or_error(req.grammar_future))
                req.grammar_future = None

    def _submit(self, reqs: list[Request], loop: asyncio.AbstractEventLoop | None, stream: bool) -> DeltaChannel:
        self._attach_matchers(reqs)
        channel = DeltaChannel(loop)
        for index, req in enumerate(reqs):
            req.on_update = _reporter(channel, index, stream)
        if len(self.core.scheduler.waiting) + len(reqs) > self.config.max_queued_requests:
            raise RequestError("too many queued requests", code="queue_full")
        self._post(lambda: self.core.add_requests(reqs))
        return channel

    # --- public API ------------------------------------------------------------------------------------
    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob: bool = False,
                 logprob_start_len: int = -1, top_logprobs_num: int = 0, stream: bool = False, **extra: Any):
        """Generate for one prompt (→ dict) or a list (→ list); `stream=True` → iterator of cumulative dicts."""
        reqs, batch = self.make_requests(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                         top_logprobs_num, **extra)
        channel = self._submit(reqs, None, stream)
        if stream:
            return GenerationStream(self, channel, reqs)
        results = self._wait(channel, reqs)
        return results if batch or len(results) > 1 else results[0]

    def _wait(self, channel: DeltaChannel, reqs: list[Request]) -> list[dict[str, Any]]:
        acc = _accumulator(reqs)
        pending = len(reqs)
        try:
            while pending:
                for delta in self.next_deltas(channel):
                    acc.apply(delta)
                    pending -= delta.finished
        except BaseException:
            self.abort_all_of(reqs)  # the caller gave up (KeyboardInterrupt, ...): free the requests
            raise
        return [acc.result(i) for i in range(len(reqs))]

    def next_deltas(self, channel: DeltaChannel) -> list[StepDelta]:
        """Block until the engine reports on `channel`; raises RuntimeError once the engine has stopped."""
        while True:
            deltas = channel.take(timeout=1.0)
            if deltas:
                return deltas
            if not self.is_alive:
                raise RuntimeError(f"the engine stopped: {self.loop_error or 'shut down'}")

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob: bool = False,
                             logprob_start_len: int = -1, top_logprobs_num: int = 0, stream: bool = False,
                             **extra: Any):
        """Like `generate`, awaitable; `stream=True` returns an async iterator of cumulative dicts.

        Tokenizing and validation run in a worker thread, never on the caller's event loop.
        """
        reqs, batch = await asyncio.to_thread(self.make_requests, prompt, sampling_params, input_ids,
                                              return_logprob, logprob_start_len, top_logprobs_num, **extra)
        for fut in {id(r.grammar_future): r.grammar_future for r in reqs if r.grammar_future}.values():
            with contextlib.suppress(Exception):  # errors are raised by _submit, on the same future
                # shield: a caller cancelled while waiting must not cancel a compile other requests share
                await asyncio.shield(asyncio.wrap_future(fut))
        channel = self._submit(reqs, asyncio.get_running_loop(), stream)
        if stream:
            return AsyncGenerationStream(self, channel, reqs)
        acc = _accumulator(reqs)
        pending = len(reqs)
        try:
            while pending:
                for delta in await channel.take_async():
                    acc.apply(delta)
                    pending -= delta.finished
        finally:
            if pending:
                self.abort_all_of(reqs)
        results = [acc.result(i) for i in range(len(reqs))]
        return results if batch or len(results) > 1 else results[0]

    def abort_all_of(self, reqs: list[Request]) -> None:
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
        return self._call(lambda: engine_stats(self.core))



def _reporter(channel: DeltaChannel, index: int, stream: bool) -> Callable[[Request, bool], None]:
    def report(req: Request, finished: bool) -> None:
        if not (stream or finished):
            return  # non-streaming callers only want the final result (one delta with everything)
        channel.put(take_delta(req, index, finished))

    return report


def _accumulator(reqs: list[Request]) -> StreamAccumulator:
    lp = reqs[0].logprobs  # one call: the same logprob options for every sequence
    return StreamAccumulator(len(reqs), lp.return_logprob, lp.top_logprobs_num > 0)


class _Stream:
    """What both stream iterators share: cumulative result dicts folded from the engine's deltas.

    Closing a stream (or dropping it) before the end aborts the requests still running. `channel` is the
    bounded buffer between the engine and this reader.
    """

    def __init__(self, engine: Engine, channel: DeltaChannel, reqs: list[Request]) -> None:
        self.engine, self.channel, self._reqs = engine, channel, reqs
        self._acc = _accumulator(reqs)
        self._ready: deque[dict[str, Any]] = deque()
        self._pending = len(reqs)

    def _fold(self, deltas: list[StepDelta]) -> None:
        for delta in deltas:
            self._acc.apply(delta)
            self._pending -= delta.finished
            result = self._acc.result(delta.index)
            self._ready.append({**result, "index": delta.index} if len(self._reqs) > 1 else result)

    def close(self) -> None:
        """Stop reading; requests still running are aborted (their KV is freed on the next step)."""
        if self._pending:
            self._pending = 0
            self.engine.abort_all_of(self._reqs)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # why: may run at interpreter exit, with the engine gone
            self.close()


class GenerationStream(_Stream, Iterator[dict[str, Any]]):
    """The iterator `generate(stream=True)` returns."""

    def __next__(self) -> dict[str, Any]:
        while not self._ready:
            if not self._pending:
                raise StopIteration
            try:
                deltas = self.engine.next_deltas(self.channel)
            except BaseException:
                self.close()
                raise
            self._fold(deltas)
        return self._ready.popleft()


class AsyncGenerationStream(_Stream, AsyncIterator[dict[str, Any]]):
    """The async iterator `async_generate(stream=True)` returns."""

    async def __anext__(self) -> dict[str, Any]:
        while not self._ready:
            if not self._pending:
                raise StopAsyncIteration
            try:
                deltas = await self.channel.take_async()
            except BaseException:
                self.close()
                raise
            self._fold(deltas)
        return self._ready.popleft()

    async def aclose(self) -> None:
        self.close()
