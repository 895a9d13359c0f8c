"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from fastapi import APIRouter, Request
from starlette.responses import Response

from sprig.runtime.server.http_common import (
    body_spec,
    get_state,
    json_response,
    read_model,
    state_texts,
    tenant_of,
)
from sprig.runtime.server.http_errors import APIError, ErrorType
from sprig.runtime.server.openai_convert import (
    OpenAIPlan,
    chat_plan,
    check_chat,
    check_completion,
    completion_plan,
)
from sprig.runtime.server.openai_output import (
    ChatStreamer,
    CompletionStreamer,
    ResponseIds,
    chat_response,
    completion_response,
)
from sprig.runtime.server.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
)
from sprig.runtime.server.run import (
    DONE,
    EventStream,
    GenerationRun,
    RunStopped,
    StopCause,
    engine_failure,
    run_to_end,
    sse,
    stream_error,
    timeout_error,
)
from sprig.runtime.server.state import ServerState

logger = logging.getLogger(__name__)





class Streamer(Protocol):
    def chunk(self, event: dict[str, Any]) -> Any: ...

    def aborted(self) -> Any: ...

    def usage(self, results: list[dict[str, Any]]) -> Any: ...


async def openai_sse(state: ServerState, run: GenerationRun, streamer: Streamer, plan: OpenAIPlan,
                     opening: Any = None) -> AsyncGenerator[bytes, None]:
    """The SSE body of a streaming OpenAI request: chunks, [usage], [DONE]; errors as an SSE error event."""
    if opening is not None:
        yield sse(opening)
    try:
        async for event in run.events():
            failure = engine_failure([event])
            if failure is not None:
                yield stream_error(state, failure)
                yield DONE
                return
            chunk = streamer.chunk(event)
            if chunk is not None:
                yield sse(chunk)
    except RunStopped as stop:
        if stop.cause is StopCause.DISCONNECTED:
            return
        if stop.cause is StopCause.TIMEOUT:
            yield stream_error(state, timeout_error())
            yield DONE
            return
        chunk = streamer.aborted()
        if chunk is not None:
            yield sse(chunk)
    except Exception:  # noqa: BLE001 - a bug in conversion must end this stream cleanly, not the server
        logger.exception("streaming failed")
        yield stream_error(state, APIError(500, "internal error while streaming", ErrorType.SERVER, None,
                                           "internal_error"))
        yield DONE
        return
    if plan.include_usage:
        yield sse(streamer.usage(run.results(aborted=True)))
    yield DONE




async def _start(request: Request, state: ServerState, sequences: int, endpoint: str,
                 build: Callable[[], OpenAIPlan], prefix: str) -> tuple[OpenAIPlan, GenerationRun, ResponseIds]:
    """Admit (before any tokenizing), build the plan, submit."""
    ticket = state.admit(tenant_of(request), sequences, endpoint)
    try:
        plan = await asyncio.to_thread(build)  # chat template + tokenizing: never on the event loop
    except BaseException:
        ticket.release(0)
        raise
    ids = ResponseIds(f"{prefix}-{uuid.uuid4().hex}", state.model_name)
    plan.call.kwargs["rid"] = ids.id
    run = await GenerationRun.start(state, ticket, plan.call)
    return plan, run, ids


def openai_router() -> APIRouter:
    """The authenticated OpenAI routes."""
    router = APIRouter()

    @router.post("/v1/completions", openapi_extra=body_spec(CompletionRequest), response_model=None)
    async def completions(request: Request) -> Response:
        """OpenAI text completions (string, strings or token ids as prompt); SSE with `stream`."""
        state = get_state(request)
        engine = state.ready_engine()
        limit = state.settings.max_sequences_per_request
        req = await read_model(request, CompletionRequest, state.settings.max_request_bytes)
        state.check_model(req.model)
        sequences = check_completion(req, engine, limit)
        plan, run, ids = await _start(request, state, sequences, "completions",
                                      lambda: completion_plan(req, engine, limit), "cmpl")
        texts = state_texts(state)
        if plan.stream:
            streamer = CompletionStreamer(ids, plan, texts)
            return EventStream(run, lambda: openai_sse(state, run, streamer, plan))
        run.watch_disconnect(request.receive)
        results = await run_to_end(run)
        return json_response(completion_response(ids, plan, results, texts))

    @router.post("/v1/chat/completions", openapi_extra=body_spec(ChatCompletionRequest), response_model=None)
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completions through the chat template, with response_format and tools."""
        state = get_state(request)
        engine = state.ready_engine()
        limit = state.settings.max_sequences_per_request
        req = await read_model(request, ChatCompletionRequest, state.settings.max_request_bytes)
        state.check_model(req.model)
        sequences = check_chat(req, engine, limit)
        plan, run, ids = await _start(request, state, sequences, "chat",
                                      lambda: chat_plan(req, engine, limit), "chatcmpl")
        texts = state_texts(state)
        if plan.stream:
            streamer = ChatStreamer(ids, plan, texts)
            return EventStream(run, lambda: openai_sse(state, run, streamer, plan, streamer.opening()))
        run.watch_disconnect(request.receive)
        results = await run_to_end(run)
        return json_response(chat_response(ids, plan, results, texts))

    @router.get("/v1/models", response_model=None)
    async def list_models(request: Request) -> Response:
        """The one model this server serves."""
        return json_response(ModelList([_card(get_state(request))]))

    @router.get("/v1/models/{model:path}", response_model=None)
    async def get_model(request: Request, model: str) -> Response:
        """One model by id (404 when not served here)."""
        state = get_state(request)
        state.check_model(model)
        return json_response(_card(state))

    return router


def _card(state: ServerState) -> ModelCard:
    engine = state.ready_engine()
    return ModelCard(state.model_name, int(state.started), engine.core.model_path, engine.core.context_length)
