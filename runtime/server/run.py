"""What every generating route shares: starting a run, following it, its deadline, its SSE body and errors.

`start_run` admits a call, then in **one** worker-thread call plans it (chat template, tokenizing: the route's
`plan`) and validates it (`Engine.prepare`), and submits it (`Engine.open_stream`). A `GenerationRun` races the
engine's deltas (`StepDelta`) against the client leaving, the deadline and shutdown; routes cut their chunks from
the deltas directly, and the run folds them (O(new) per delta) only for the final results. Stopping a run closes
the engine's stream, which aborts the engine requests: their KV is freed at the next engine step. `EventStream` is
the SSE response (it watches the connection while it streams) and `sse_body` its one error handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sprig.runtime.engine.engine import DeltaStream
from sprig.runtime.engine.generate_request import GenerateRequest
from sprig.runtime.engine.request import EMPTY_META, PreparedCall, SequenceMeta, StepDelta, StreamAccumulator
from sprig.runtime.server.auth import Tenant
from sprig.runtime.server.http_common import APIError, ErrorType, bad_request, from_value_error
from sprig.runtime.server.state import ServerState, StopCause, Ticket

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
P = TypeVar("P")


@dataclass(frozen=True)
class ServerCall:
    """What a route asks of the engine (a typed `GenerateRequest`) and the client's own deadline."""

    request: GenerateRequest
    timeout: float | None = None


class RunStopped(Exception):
    """The run ended before the engine finished it."""

    def __init__(self, cause: StopCause) -> None:
        super().__init__(cause.value)
        self.cause = cause


def sse(obj: Any) -> bytes:
    """One server-sent event carrying a JSON payload."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def check_timeout(timeout: float | None) -> float | None:
    """A client's `timeout` (seconds): positive and finite, or None."""
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise bad_request("timeout must be a positive finite number of seconds", "timeout", "out_of_range")
    return timeout


def timeout_error() -> APIError:
    return APIError(408, "the request ran past its deadline and was aborted", ErrorType.TIMEOUT, "timeout",
                    "request_timeout")


def engine_failure(meta: SequenceMeta) -> APIError | None:
    """A 500 when the engine aborted a sequence with an error message (device fault, post-processing bug)."""
    message = meta.failure
    return None if not message else APIError(500, message, ErrorType.SERVER, None, "engine_error")


async def start_run(state: ServerState, tenant: Tenant, sequences: int, endpoint: str,
                    plan: Callable[[], tuple[P, ServerCall]], lora: str | None = None) -> tuple[P, GenerationRun]:
    """Admit (before any tokenizing), plan and validate in one worker-thread call, submit; `lora`: every prompt's
    LoRA adapter (an OpenAI request's `model`)."""
    ticket = state.admit(tenant, sequences, endpoint)
    engine = state.ready_engine()

    def plan_and_prepare() -> tuple[P, ServerCall, PreparedCall]:
        planned, call = plan()
        request = dataclasses.replace(call.request, namespace=tenant.namespace)  # why: a tenant's own prefixes
        if lora is not None:
            request = dataclasses.replace(request, lora_paths=(lora,) * len(request.prompts),
                                          names=dataclasses.replace(request.names, lora="model"))
        return planned, call, engine.prepare(request)

    try:  # chat template + tokenizing + validation: never on the event loop, one hop
        planned, call, prepared = await asyncio.to_thread(plan_and_prepare)
    except ValueError as e:  # RequestError, SamplingParamsError: the request's fault
        ticket.release(0)
        raise from_value_error(e) from None
    except BaseException:
        ticket.release(0)
        raise
    return planned, await GenerationRun.start(state, ticket, prepared, call.timeout)


class GenerationRun:
    """An admitted engine call and everything that can end it."""

    def __init__(self, state: ServerState, ticket: Ticket, call: PreparedCall, deltas: DeltaStream,
                 timeout: float | None) -> None:
        self.state = state
        self.ticket = ticket
        self.num_sequences = len(call.requests)
        self._deltas = deltas
        lp = call.requests[0].logprobs
        self.acc = StreamAccumulator(self.num_sequences, lp.return_logprob, lp.top_logprobs_num > 0)
        self.fold = True  # False: chunks come from the deltas alone and nobody asks for `results()`
        self.arrival = time.monotonic()
        self.deadline = self.arrival + timeout if timeout else None
        self.stopped: asyncio.Future[StopCause] = asyncio.get_running_loop().create_future()
        self.meta: dict[int, SequenceMeta] = {}  # the latest meta_info of each sequence
        self.first_token: dict[int, float] = {}
        self.recorded: set[int] = set()
        self.exhausted = False
        self.closed = False
        self._watcher: asyncio.Task[None] | None = None
        state.runs.add(self)

    @classmethod
    async def start(cls, state: ServerState, ticket: Ticket, call: PreparedCall,
                    timeout: float | None) -> GenerationRun:
        """Submit a prepared call to the engine; errors release the ticket."""
        engine = state.ready_engine()
        timeout = min(filter(None, (timeout, state.settings.request_timeout)), default=None)
        try:  # the deadline covers grammar compilation, which open_stream awaits before submitting
            deltas = await asyncio.wait_for(engine.open_stream(call), timeout)
        except asyncio.TimeoutError:
            ticket.release(0)
            state.metrics.timeouts.inc()
            raise timeout_error() from None
        except ValueError as e:  # a grammar that does not compile, a full queue
            ticket.release(0)
            raise from_value_error(e) from None
        except RuntimeError as e:  # the engine stopped between the health check and the submit
            ticket.release(0)
            raise APIError(503, str(e), ErrorType.UNAVAILABLE, None, "engine_stopped") from None
        except BaseException:
            ticket.release(0)
            raise
        return cls(state, ticket, call, deltas, timeout)

    # --- stopping ---------------------------------------------------------------------------------------------
    def stop(self, cause: StopCause) -> None:
        """End the run for `cause` (the first cause wins and is counted in the metrics)."""
        if self.stopped.done():
            return
        self.stopped.set_result(cause)
        if cause is StopCause.DISCONNECTED:
            self.state.metrics.disconnects.inc()
        elif cause is StopCause.TIMEOUT:
            self.state.metrics.timeouts.inc()

    def watch_disconnect(self, receive: Receive) -> None:
        """Stop the run when the client's connection closes (the body has been read already)."""

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    self.stop(StopCause.DISCONNECTED)
                    return

        self._watcher = asyncio.get_running_loop().create_task(watch())

    @property
    def disconnected(self) -> bool:
        return self.stopped.done() and self.stopped.result() is StopCause.DISCONNECTED

    # --- events -----------------------------------------------------------------------------------------------
    async def events(self) -> AsyncGenerator[StepDelta, None]:
        """The engine's deltas, one sequence's at a time; raises `RunStopped` when the client left, the deadline
        passed or the server is shutting down (the engine requests are aborted first)."""
        while True:
            nxt: asyncio.Future[list[StepDelta]] = asyncio.ensure_future(anext(self._deltas))
            remaining = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            waiting: set[asyncio.Future[Any]] = {nxt, self.stopped}
            done, _ = await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if nxt in done:
                try:
                    batch = nxt.result()
                except StopAsyncIteration:
                    self.exhausted = True
                    return
                for delta in batch:
                    self._observe(delta)
                    yield delta
                continue
            nxt.cancel()  # why: cancelling the pending read runs the engine stream's close, which aborts
            await asyncio.gather(nxt, return_exceptions=True)
            self.exhausted = True
            self.stop(StopCause.TIMEOUT)  # no-op when another cause came first
            raise RunStopped(self.stopped.result())

    async def collect(self) -> list[dict[str, Any]]:
        """Run to the end; the final result of every sequence in index order."""
        async for _ in self.events():
            pass
        return self.results()

    def results(self, aborted: bool = False) -> list[dict[str, Any]]:
        """Each sequence's result dict so far (built once, at the end); with `aborted`, unfinished ones are marked
        finish_reason abort."""
        out = []
        for i in range(self.num_sequences):
            r: dict[str, Any] = self.acc.result(i) if i in self.meta else {"text": "", "output_ids": [],
                                                                             "meta_info": EMPTY_META.to_dict()}
            meta: dict[str, Any] = r["meta_info"]
            if aborted and meta.get("finish_reason") is None:
                meta["finish_reason"] = {"type": "abort", "matched": None}
            out.append(r)
        return out

    def unfinished_deltas(self) -> list[StepDelta]:
        """At shutdown: a last, empty delta (finish_reason abort) for each started sequence not finished yet."""
        out = []
        for i in sorted(self.meta):
            if i not in self.recorded:
                out.append(StepDelta(i, [], [], [], [], self.meta[i].aborted(), True))
                self.acc.apply(out[-1])
        return out

    def metas(self) -> list[SequenceMeta]:
        """The latest meta_info of every sequence (usage counts), without building the results."""
        return [self.meta.get(i, EMPTY_META) for i in range(self.num_sequences)]

    def _observe(self, delta: StepDelta) -> None:
        index = delta.index
        if self.fold:
            self.acc.apply(delta)
        self.meta[index] = delta.meta
        now = time.monotonic()
        if delta.ids and index not in self.first_token:
            self.first_token[index] = now
        if delta.meta.finished:
            self._record(index, now)

    def _record(self, index: int, now: float) -> None:
        if index in self.recorded or index not in self.meta:
            return
        self.recorded.add(index)
        first = self.first_token.get(index)
        self.state.metrics.sequence_finished(self.ticket.tenant.name, self.meta[index],
                                             None if first is None else first - self.arrival, now - self.arrival)

    @property
    def generated_tokens(self) -> int:
        return sum(m.completion_tokens for m in self.meta.values())

    async def close(self) -> None:
        """Free everything: the watcher, the engine requests (if still running), the ticket. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._watcher is not None:
            self._watcher.cancel()
        if not self.exhausted:
            self._deltas.close()
        now = time.monotonic()
        for index in list(self.meta):
            self._record(index, now)
        self.state.runs.discard(self)
        self.ticket.release(self.generated_tokens)


class EventStream(Response):
    """An SSE response that streams a run's chunks and stops the run as soon as the client disconnects."""

    media_type = "text/event-stream"

    def __init__(self, run: GenerationRun, body: Callable[[], AsyncGenerator[bytes, None]]) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers(SSE_HEADERS)  # why: no body attribute, so no Content-Length (chunked)
        self.run = run
        self.body_factory = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.run.watch_disconnect(receive)
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async with contextlib.aclosing(self.body_factory()) as chunks:
                async for chunk in chunks:
                    if self.run.disconnected:
                        break
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.run.close()


def stream_error(state: ServerState, error: APIError) -> bytes:
    """An error after the stream started: an SSE error event (the caller then sends [DONE])."""
    state.metrics.errors.labels(error.type.value, str(error.code)).inc()
    return sse(error.body())


async def sse_body(state: ServerState, run: GenerationRun, chunk: Callable[[StepDelta], Any],
                   aborted: Callable[[], Iterable[Any]], tail: Callable[[], Iterable[Any]] = tuple,
                   opening: Any = None) -> AsyncGenerator[bytes, None]:
    """The SSE body of every streaming route: [opening], a chunk per delta (`chunk` may answer None), [DONE].

    An engine failure, the deadline or a bug ends it with an SSE error event and [DONE]; at shutdown the
    unfinished sequences get `aborted()`'s chunks; `tail()`'s chunks (usage) come last; nothing once the
    client has left.
    """
    if opening is not None:
        yield sse(opening)
    try:
        async for delta in run.events():
            failure = engine_failure(delta.meta)
            if failure is not None:
                yield stream_error(state, failure)
                yield DONE
                return
            out = chunk(delta)
            if out is not None:
                yield sse(out)
    except RunStopped as stop:
        if stop.cause is StopCause.DISCONNECTED:
            return
        if stop.cause is StopCause.TIMEOUT:
            yield stream_error(state, timeout_error())
            yield DONE
            return
        for out in aborted():
            yield sse(out)
    except Exception:  # noqa: BLE001 - a bug in conversion must end this stream cleanly, not the server
        logger.exception("streaming failed")
        yield stream_error(state, APIError(500, "internal error while streaming", ErrorType.SERVER, None,
                                           "internal_error"))
        yield DONE
        return
    for out in tail():
        yield sse(out)
    yield DONE


async def run_to_end(run: GenerationRun) -> list[dict[str, Any]]:
    """Non-streaming: wait for the results while watching the client; 408 at the deadline, abort at shutdown.

    The caller must have called `run.watch_disconnect`; the run is closed here.
    """
    try:
        results = await run.collect()
    except RunStopped as stop:
        if stop.cause is StopCause.TIMEOUT:
            raise timeout_error() from None
        if stop.cause is StopCause.DISCONNECTED:
            raise APIError(499, "the client closed the connection", ErrorType.INVALID_REQUEST, None,
                           "client_closed") from None
        results = run.results(aborted=True)
    finally:
        await run.close()
    for index in sorted(run.meta):
        failure = engine_failure(run.meta[index])
        if failure is not None:
            raise failure
    return results
