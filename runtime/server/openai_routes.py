"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from sprig.runtime.engine.engine import Engine
from sprig.runtime.engine.request import SequenceMeta, StepDelta
from sprig.runtime.server.http_common import body_spec, json_response, read_model
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
from sprig.runtime.server.run import EventStream, run_to_end, sse_body, start_run
from sprig.runtime.server.state import ServerState, TokenTexts, get_state, state_texts, tenant_of

logger = logging.getLogger(__name__)


class Streamer(Protocol):
    def chunk(self, delta: StepDelta) -> Any: ...

    def aborted(self) -> Any: ...

    def usage(self, metas: list[SequenceMeta]) -> Any: ...


@dataclass(frozen=True)
class OpenAIEndpoint:
    """What differs between /v1/completions and /v1/chat/completions; `serve` is the one path both take."""

    body: type[BaseModel]
    endpoint: str  # the metrics and admission label
    id_prefix: str
    check: Callable[[Any, Engine, int], int]  # cheap checks before admission -> sequences
    plan: Callable[[Any, Engine, str, Any], OpenAIPlan]  # worker thread: template, tokenize (+ settings)
    respond: Callable[[ResponseIds, OpenAIPlan, list[dict[str, Any]], TokenTexts], Any]
    streamer: Callable[[ResponseIds, OpenAIPlan, TokenTexts], Streamer]
    opens_with_role: bool = False  # chat streams open with the assistant role

    async def serve(self, request: Request) -> Response:
        state = get_state(request)
        engine = state.ready_engine()
        req = await read_model(request, self.body, state.settings.max_request_bytes)
        adapter = state.model_adapter(req.model)  # type: ignore[attr-defined]
        sequences = self.check(req, engine, state.settings.max_sequences_per_request)
        ids = ResponseIds(f"{self.id_prefix}-{uuid.uuid4().hex}", state.model_name)

        def plan() -> tuple[OpenAIPlan, Any]:
            planned = self.plan(req, engine, ids.id, state.settings)
            return planned, planned.call

        plan_, run = await start_run(state, tenant_of(request), sequences, self.endpoint, plan, adapter)
        texts = state_texts(state)
        if plan_.stream:
            run.fold = False  # why: chunks are cut from the deltas, usage from the metas
            streamer = self.streamer(ids, plan_, texts)
            opening = streamer.opening() if self.opens_with_role else None  # type: ignore[attr-defined]

            def aborted() -> list[Any]:
                chunk = streamer.aborted()
                return [chunk] if chunk is not None else []

            def usage() -> list[Any]:
                return [streamer.usage(run.metas())] if plan_.include_usage else []

            return EventStream(run, lambda: sse_body(state, run, streamer.chunk, aborted, usage, opening))
        run.watch_disconnect(request.receive)
        results = await run_to_end(run)
        return json_response(self.respond(ids, plan_, results, texts))


COMPLETIONS = OpenAIEndpoint(CompletionRequest, "completions", "cmpl", check_completion, completion_plan,
                             completion_response, CompletionStreamer)
CHAT = OpenAIEndpoint(ChatCompletionRequest, "chat", "chatcmpl", check_chat, chat_plan, chat_response, ChatStreamer,
                      opens_with_role=True)


def openai_router() -> APIRouter:
    """The authenticated OpenAI routes."""
    router = APIRouter()

    @router.post("/v1/completions", openapi_extra=body_spec(CompletionRequest), response_model=None)
    async def completions(request: Request) -> Response:
        """OpenAI text completions (string, strings or token ids as prompt); SSE with `stream`."""
        return await COMPLETIONS.serve(request)

    @router.post("/v1/chat/completions", openapi_extra=body_spec(ChatCompletionRequest), response_model=None)
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completions through the chat template, with response_format and tools."""
        return await CHAT.serve(request)

    @router.get("/v1/models", response_model=None)
    async def list_models(request: Request) -> Response:
        """The model this server serves and its LoRA adapters (their `parent` is the model)."""
        state = get_state(request)
        adapters = state.ready_engine().lora.adapters()
        return json_response(ModelList([_card(state), *(_card(state, n) for n in adapters)]))

    @router.get("/v1/models/{model:path}", response_model=None)
    async def get_model(request: Request, model: str) -> Response:
        """One model by id (404 when not served here)."""
        state = get_state(request)
        return json_response(_card(state, state.model_adapter(model)))

    return router


def _card(state: ServerState, adapter: str | None = None) -> ModelCard:
    engine = state.ready_engine()
    if adapter is not None:
        root = engine.lora.adapters().get(adapter, "")
        return ModelCard(adapter, int(state.started), root, engine.context_length, parent=state.model_name)
    return ModelCard(state.model_name, int(state.started), engine.model_path, engine.context_length)
