"""One generation in flight: the engine's event stream raced against the client leaving, the deadline and shutdown.

Every route submits through `GenerationRun.start` with ``stream=True`` (non-streaming routes keep the last
event), so one mechanism gives TTFT/TPOT metrics, per-request deadlines and disconnect handling everywhere.
Stopping a run closes the engine's stream, whose ``finally`` aborts the engine requests: their KV is freed at the
next engine step. `EventStream` is the SSE response; it watches the connection while it streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sprig.runtime.server.http_errors import APIError, ErrorType, from_value_error
from sprig.runtime.server.openai_convert import EngineCall
from sprig.runtime.server.state import ServerState, StopCause, Ticket

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class RunStopped(Exception):
    """The run ended before the engine finished it."""

    def __init__(self, cause: StopCause) -> None:
        super().__init__(cause.value)
        self.cause = cause


def sse(obj: Any) -> bytes:
    """One server-sent event carrying a JSON payload."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def timeout_error() -> APIError:
    return APIError(408, "the request ran past its deadline and was aborted", ErrorType.TIMEOUT, "timeout",
                    "request_timeout")


def engine_failure(results: list[dict[str, Any]]) -> APIError | None:
    """A 500 when the engine aborted a sequence with an error message (device fault, post-processing bug)."""
    for r in results:
        reason = r["meta_info"].get("finish_reason") or {}
        if reason.get("type") == "abort" and reason.get("message"):
            return APIError(500, str(reason["message"]), ErrorType.SERVER, None, "engine_error")
    return None


class GenerationRun:
    """An admitted engine call and everything that can end it."""

    def __init__(self, state: ServerState, ticket: Ticket, call: EngineCall, events: AsyncIterator[dict]) -> None:
        self.state = state
        self.ticket = ticket
        self.call = call
        self._events = events
        self.arrival = time.monotonic()
        self.deadline = self.arrival + call.timeout if call.timeout else None
        self.stopped: asyncio.Future[StopCause] = asyncio.get_running_loop().create_future()
        self.latest: dict[int, dict[str, Any]] = {}
        self.first_token: dict[int, float] = {}
        self.recorded: set[int] = set()
        self.exhausted = False
        self.closed = False
        self._watcher: asyncio.Task[None] | None = None
        state.runs.add(self)

    @classmethod
    async def start(cls, state: ServerState, ticket: Ticket, call: EngineCall) -> GenerationRun:
        """Submit the call to the engine; validation errors become 400s and release the ticket."""
        engine = state.ready_engine()
        timeout = min(filter(None, (call.timeout, state.settings.request_timeout)), default=None)
        call.timeout = timeout
        try:  # the deadline covers grammar compilation, which async_generate awaits before submitting
            events = await asyncio.wait_for(
                engine.async_generate(**call.kwargs, stream=True, namespace=ticket.tenant.namespace), timeout)
        except asyncio.TimeoutError:
            ticket.release(0)
            state.metrics.timeouts.inc()
            raise timeout_error() from None
        except ValueError as e:  # RequestError, SamplingParamsError, GrammarError: the request's fault
            ticket.release(0)
            raise from_value_error(e, call.rename) from None
        except RuntimeError as e:  # the engine stopped between the health check and the submit
            ticket.release(0)
            raise APIError(503, str(e), ErrorType.UNAVAILABLE, None, "engine_stopped") from None
        except BaseException:
            ticket.release(0)
            raise
        return cls(state, ticket, call, events)

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
    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The engine's cumulative events; raises `RunStopped` when the client left, the deadline passed or the
        server is shutting down (the engine requests are aborted first)."""
        while True:
            nxt: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(anext(self._events))
            remaining = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            waiting: set[asyncio.Future[Any]] = {nxt, self.stopped}
            done, _ = await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if nxt in done:
                try:
                    event = nxt.result()
                except StopAsyncIteration:
                    self.exhausted = True
                    return
                self._observe(event)
                yield event
                continue
            nxt.cancel()  # why: cancelling the pending read runs the engine stream's finally, which aborts
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
        """The latest result of each sequence; with `aborted`, unfinished ones are marked finish_reason abort."""
        out = []
        for i in range(self.call.num_sequences):
            r = self.latest.get(i) or {"text": "", "output_ids": [], "meta_info": _empty_meta()}
            if aborted and r["meta_info"].get("finish_reason") is None:
                r = {**r, "meta_info": {**r["meta_info"], "finish_reason": {"type": "abort", "matched": None}}}
            out.append(r)
        return out

    def _observe(self, event: dict[str, Any]) -> None:
        index = event.get("index", 0)
        self.latest[index] = event
        now = time.monotonic()
        if event["output_ids"] and index not in self.first_token:
            self.first_token[index] = now
        if event["meta_info"].get("finish_reason") is not None:
            self._record(index, now)

    def _record(self, index: int, now: float) -> None:
        if index in self.recorded or index not in self.latest:
            return
        self.recorded.add(index)
        first = self.first_token.get(index)
        self.state.metrics.sequence_finished(self.ticket.tenant.name, self.latest[index]["meta_info"],
                                             None if first is None else first - self.arrival, now - self.arrival)

    @property
    def generated_tokens(self) -> int:
        return sum(len(r["output_ids"]) for r in self.latest.values())

    async def close(self) -> None:
        """Free everything: the watcher, the engine requests (if still running), the ticket. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._watcher is not None:
            self._watcher.cancel()
        if not self.exhausted:
            with contextlib.suppress(Exception):
                await self._events.aclose()  # type: ignore[attr-defined]
        now = time.monotonic()
        for index in list(self.latest):
            self._record(index, now)
        self.state.runs.discard(self)
        self.ticket.release(self.generated_tokens)


def _empty_meta() -> dict[str, Any]:
    return {"id": None, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "finish_reason": None,
            "e2e_latency": 0.0}


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
    failure = engine_failure(results)
    if failure is not None:
        raise failure
    return results
