"""`sprig.Engine`: the thread-safe front of the engine core, with sync, async and streaming generation.

A background thread runs the step loop of the schedule the core chose (`start_loop`). Callers on any thread or
asyncio loop submit requests through an inbox; each call's requests report back through its own bounded
`DeltaChannel` (request.py), so callers never touch engine state. The engine sends deltas; the streams here build
the cumulative dicts on the caller's side.
Longer than 450 lines: a call's validation into requests (grammar, reasoning, adapter) stays beside the front it serves.
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
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sprig.grammar import matcher_for
from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.constraints import compiled_or_error, constraint_named, spec_from_params
from sprig.runtime.engine.core import EngineCore
from sprig.runtime.engine.gauges import EngineGauges, read_gauges
from sprig.runtime.engine.generate_request import (
    NATIVE_NAMES,
    FieldNames,
    GenerateRequest,
    LogprobOptions,
    Prompt,
    SamplingParams,
    generate_request,
    is_int,
)
from sprig.runtime.engine.lora_control import LoraControl
from sprig.runtime.engine.lora_manager import resolve_adapter
from sprig.runtime.engine.output_text import IncrementalDetokenizer, StopChecker
from sprig.runtime.engine.overlap import OverlapLoop
from sprig.runtime.engine.pipeline import PipelineLoop
from sprig.runtime.engine.request import (
    DeltaChannel,
    LoopWaker,
    LoraRef,
    PreparedCall,
    Request,
    StepDelta,
    take_delta,
)
from sprig.runtime.engine.schedule import Schedule
from sprig.runtime.engine.serial import SerialLoop
from sprig.runtime.engine.streams import AsyncGenerationStream, DeltaStream, GenerationStream, accumulator
from sprig.runtime.engine.summary import engine_facts, engine_stats
from sprig.runtime.engine.thinking import starts_thinking, with_thinking
from sprig.runtime.errors import RequestError
from sprig.runtime.reasoning_format import ReasoningFormat, reasoning_format

logger = logging.getLogger(__name__)

MAX_BATCH_PROMPTS = 4096
MAX_TOP_LOGPROBS = 20
MAX_PRIORITY = 2**31 - 1  # SGLang's int32 range; larger values would only reorder the same way

StepLoop = SerialLoop | OverlapLoop | PipelineLoop


def start_loop(core: EngineCore) -> StepLoop:
    """The step loop of the schedule the core chose at start."""
    schedule = core.schedule.schedule
    if schedule is Schedule.PIPELINE:
        return PipelineLoop(core, core.config.pp_size)
    return OverlapLoop(core) if schedule is Schedule.OVERLAP else SerialLoop(core)


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
        built: Future[tuple[EngineCore, StepLoop]] = Future()
        # The loop thread builds the core too: it is then the process's only OpenMP master. A second thread's
        # pool of workers makes libgomp count more threads than cores, and it then stops spinning between parallel
        # regions (every kernel wakes its workers through the OS): measured 2x slower decode on two cores.
        self._thread = threading.Thread(target=self._build_and_loop, args=(built,), name="sprig-engine",
                                        daemon=True)
        self._thread.start()
        self.core, self.loop = built.result()  # re-raises a load error (a CheckpointError) here, in this thread
        self.tokenizer = self.core.tokenizer
        self.model_config = self.core.model_config
        self.lora = LoraControl(self.core.lora, self._call)  # run-time adapter loads and unloads

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
        self.loop.shutdown()
        self.core.shutdown()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self.loop_error is None

    def _build_and_loop(self, built: Future[tuple[EngineCore, StepLoop]]) -> None:
        try:
            self.core = EngineCore(self.config)
            self.loop = start_loop(self.core)
        except BaseException as e:  # handed to the constructor, which raises it
            built.set_exception(e)
            return
        built.set_result((self.core, self.loop))
        self._loop()

    def _loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._inbox and not self.loop.has_work() and not self._stopping:
                        self.last_heartbeat = time.monotonic()
                        self._cv.wait(timeout=1.0)
                    ops = list(self._inbox)
                    self._inbox.clear()
                    if self._stopping and not ops:
                        return
                for op in ops:
                    op()
                self.core.raise_if_ranks_failed()
                updated = self.loop.step()
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

    # --- facts the server needs (read-only; set at load) -----------------------------------------------
    @property
    def context_length(self) -> int:
        return self.core.context_length

    @property
    def kv_pool_tokens(self) -> int:
        """Tokens the whole KV pool holds: no single sequence can be longer."""
        return self.core.kv.total_tokens

    @property
    def vocab_size(self) -> int:
        return self.core.vocab_size

    @property
    def checkpoint_format(self) -> Any:
        """What was loaded: a folder of safetensors or a GGUF file (its `name` and `file_type`)."""
        return self.core.checkpoint_format

    @property
    def model_path(self) -> str:
        return self.core.model_path

    @property
    def max_n(self) -> int:
        return self.config.max_n

    @property
    def constrained_decoding(self) -> bool:
        return hasattr(self.core, "grammar")

    @property
    def reasoning_format(self) -> ReasoningFormat | None:
        """The model's thinking markers (`reasoning_parser`), or None."""
        name = self.config.reasoning_parser
        return reasoning_format(name) if name is not None else None

    @property
    def max_new_tokens_room(self) -> int:
        """The longest sequence (prompt + output) that fits both the context and the pool."""
        return min(self.context_length, self.kv_pool_tokens)

    def load(self) -> tuple[int, int]:
        """(running, waiting) sequences: a racy read, enough for health and queue bounds."""
        return len(self.core.scheduler.running), len(self.core.scheduler.waiting)

    def has_work(self) -> bool:
        return self.loop.has_work()

    def gauges(self) -> EngineGauges:
        """Load, KV and cache figures for monitoring: racy reads from any thread, never waiting for the engine."""
        return read_gauges(self.core)

    def facts(self) -> list[tuple[str, str]]:
        """What the server prints at start: model, precision, kernels, KV pool, cache, parallelism."""
        return engine_facts(self.core)

    # --- requests --------------------------------------------------------------------------------------
    def _prompt_ids(self, prompt: Prompt, names: FieldNames) -> list[int]:
        if isinstance(prompt, tuple):
            bad = [t for t in prompt if not 0 <= t < self.core.vocab_size]
            if bad:
                raise RequestError(f"{names.prompt} contains token id {bad[0]} outside [0, {self.core.vocab_size})",
                                   param=names.prompt, code="invalid_token_id")
            result = list(prompt)
        else:
            result = self.tokenizer.encode(prompt)
        if not result:
            raise RequestError(f"{names.prompt} is empty", param=names.prompt)
        return result

    def check_lengths(self, prompt_len: int, params: SamplingParams, names: FieldNames = NATIVE_NAMES) -> None:
        """Refuse at once what could never run: too long for the context or for the whole KV pool."""
        ctx, most = self.core.context_length, names.max_new_tokens
        if prompt_len >= ctx:
            raise RequestError(f"the prompt has {prompt_len} tokens; this model's context length is {ctx}",
                               param=names.prompt, code="context_length_exceeded")
        if prompt_len + params.max_new_tokens > ctx:
            raise RequestError(
                f"prompt ({prompt_len} tokens) + {most} ({params.max_new_tokens}) exceeds the context "
                f"length {ctx}", param=most, code="context_length_exceeded")
        pool = self.core.kv.total_tokens
        if prompt_len + params.max_new_tokens > pool:
            raise RequestError(
                f"prompt ({prompt_len}) + {most} ({params.max_new_tokens}) needs more KV than the "
                f"whole pool ({pool} tokens)", param=most, code="context_length_exceeded")

    def make_requests(self, prompt: str | list[str] | None = None,
                      sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
                      input_ids: list[int] | list[list[int]] | None = None, return_logprob: bool = False,
                      logprob_start_len: int = -1, top_logprobs_num: int = 0, namespace: str = "", priority: int = 0,
                      rid: str | None = None) -> tuple[list[Request], bool]:
        """Validate and build every request of a dict-API call (nothing is submitted if any is invalid).

        Returns the requests (n copies of each prompt are consecutive) and whether the call was a batch.
        A higher `priority` is admitted first (the scheduler's order; equal priorities keep its usual order).
        """
        call = self.prepare(generate_request(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                             top_logprobs_num, namespace, priority, rid))
        return list(call.requests), call.batch

    def prepare(self, call: GenerateRequest) -> PreparedCall:
        """Validate a call (the one place it is validated) and build its engine requests; grammar compiles
        start here. Thread-safe: the server runs it in the same worker-thread call that tokenized the prompt."""
        names, lp = call.names, call.logprobs
        if not call.prompts:
            raise RequestError(f"{names.prompt} is empty", param=names.prompt)
        if len(call.prompts) > MAX_BATCH_PROMPTS:
            raise RequestError(f"at most {MAX_BATCH_PROMPTS} prompts per call", param=names.prompt)
        if len(call.params) != len(call.prompts):
            raise RequestError("sampling_params must be one dict or one per prompt", param="sampling_params")
        if not is_int(lp.top_logprobs_num) or not 0 <= lp.top_logprobs_num <= MAX_TOP_LOGPROBS:
            raise RequestError(f"{names.top_logprobs_num} must be an integer in [0, {MAX_TOP_LOGPROBS}]",
                               param=names.top_logprobs_num, code="out_of_range")
        if not is_int(lp.logprob_start_len) or lp.logprob_start_len < -1:
            raise RequestError("logprob_start_len must be an integer >= -1", param="logprob_start_len")
        if not is_int(call.priority) or not -MAX_PRIORITY <= call.priority <= MAX_PRIORITY:
            raise RequestError(f"priority must be an integer in [-{MAX_PRIORITY}, {MAX_PRIORITY}]", param="priority")
        reqs: list[Request] = []
        count = len(call.prompts)
        call_id = call.rid or uuid.uuid4().hex[:16]
        for i, prompt in enumerate(call.prompts):
            ids = self._prompt_ids(prompt, names)
            params = call.params[i].validate(self.core.vocab_size, max_n=self.config.max_n, names=names)
            self.check_lengths(len(ids), params, names)
            grammar = self._compile(params, names)
            base = f"{call_id}-{i}" if count > 1 else call.rid
            thinking = starts_thinking(call, params, self.reasoning_format)
            lora = resolve_adapter(self.core.lora, call.lora_paths[i] if call.lora_paths else None, names.lora)
            for k in range(params.n):
                reqs.append(self._request(ids, params, k, lp, call, base, grammar, lora))
                reqs[-1].thinking = thinking
        return PreparedCall(tuple(reqs), call.batch, names)

    def _compile(self, params: SamplingParams, names: FieldNames) -> Future | None:
        with constraint_named(names):
            spec = spec_from_params(params)
        return self.core.grammar.submit(spec) if spec is not None else None

    def _request(self, ids: list[int], params: SamplingParams, k: int, lp: LogprobOptions, call: GenerateRequest,
                 base: str | None, grammar: Future | None, lora: LoraRef | None = None) -> Request:
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
            logprobs=lp, namespace=call.namespace if lora is None else lora.namespace(call.namespace),
            priority=call.priority, grammar_future=grammar, lora=lora,
        )

    def _attach_matchers(self, call: PreparedCall) -> None:
        """Give constrained requests their matchers (compilation finished; errors raise RequestError), after
        thinking where the output starts inside it."""
        fmt = self.reasoning_format
        with constraint_named(call.names):
            for req in call.requests:
                if req.grammar_future is not None:
                    req.matcher = matcher_for(compiled_or_error(req.grammar_future))
                    req.grammar_future = None
                if fmt is not None:
                    with_thinking(req, lambda: self.core.grammar.marker_tokens(fmt.end))

    def _submit(self, call: PreparedCall, loop: asyncio.AbstractEventLoop | None, stream: bool) -> DeltaChannel:
        self._attach_matchers(call)
        reqs = list(call.requests)
        channel = DeltaChannel(None if loop is None else LoopWaker.of(loop))
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
        call = self.prepare(generate_request(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                             top_logprobs_num, **extra))
        channel = self._submit(call, None, stream)
        reqs = list(call.requests)
        if stream:
            return GenerationStream(self, channel, reqs)
        results = self._wait(channel, reqs)
        return results if call.batch or len(results) > 1 else results[0]

    def _wait(self, channel: DeltaChannel, reqs: list[Request]) -> list[dict[str, Any]]:
        acc = accumulator(reqs)
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

    async def open_stream(self, call: PreparedCall) -> DeltaStream:
        """Submit a prepared call from an event loop; its output arrives as `StepDelta`s (the HTTP path).

        Awaits the call's grammar compiles first, without blocking the loop and without cancelling a compile
        that other requests share when the caller gives up.
        """
        futures = {id(r.grammar_future): r.grammar_future for r in call.requests if r.grammar_future}
        for fut in futures.values():
            with contextlib.suppress(Exception):  # errors are raised by _submit, on the same future
                await asyncio.shield(asyncio.wrap_future(fut))
        return DeltaStream(self, self._submit(call, asyncio.get_running_loop(), True), list(call.requests))

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob: bool = False,
                             logprob_start_len: int = -1, top_logprobs_num: int = 0, stream: bool = False,
                             **extra: Any):
        """Like `generate`, awaitable; `stream=True` returns an async iterator of cumulative dicts.

        Tokenizing and validation run in a worker thread, never on the caller's event loop.
        """
        request = generate_request(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                                   top_logprobs_num, **extra)
        call = await asyncio.to_thread(self.prepare, request)
        deltas = await self.open_stream(call)
        if stream:
            return AsyncGenerationStream(deltas)
        acc = accumulator(deltas.reqs)
        try:
            async for batch in deltas:
                for delta in batch:
                    acc.apply(delta)
        finally:
            deltas.close()
        results = [acc.result(i) for i in range(len(deltas.reqs))]
        return results if call.batch or len(results) > 1 else results[0]

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
