"""The HTTP server app: FastAPI routes over one in-process `Engine` (docs/architecture.md walks one request through it).

Routes: OpenAI (`openai_routes`), SGLang-native (`native_routes`) and operations here (`/health`, `/metrics`,
`/openapi.json`). Authentication is deny-by-default on the *routed* endpoint: every route needs the API key
except those registered on the public router (`/health`, `/health_generate`, `/metrics`).

The model loads in a background thread after the socket is bound, so `/health` answers 503 until it is ready.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from starlette.responses import Response

from sprig.runtime.errors import USER_ERRORS, describe
from sprig.runtime.server.auth import Authenticator
from sprig.runtime.server.http_common import APIError, ErrorType, install_error_handlers, json_response
from sprig.runtime.server.lora_routes import LoadLoraAdapterRequest, UnloadLoraAdapterRequest, lora_router
from sprig.runtime.server.native_routes import GenerateRequest, native_router
from sprig.runtime.server.openai_protocol import ChatCompletionRequest, CompletionRequest
from sprig.runtime.server.openai_routes import openai_router
from sprig.runtime.server.state import Health, ServerSettings, ServerState, get_state

logger = logging.getLogger(__name__)

BODY_MODELS = (CompletionRequest, ChatCompletionRequest, GenerateRequest, LoadLoraAdapterRequest, UnloadLoraAdapterRequest)
EngineFactory = Callable[[], Any]


async def authenticate(request: Request) -> None:
    """Resolve the caller's tenant from `Authorization: Bearer` (401 when keys are configured and it fails)."""
    state = get_state(request)
    request.state.tenant = state.auth.authenticate(request.headers.get("authorization"))


def ops_router() -> APIRouter:
    """Public operational routes (no API key)."""
    router = APIRouter()

    @router.get("/health", response_model=None)
    async def health(request: Request) -> Response:
        """200 when the engine is loaded and making progress; 503 while loading, draining, dead or stalled."""
        status = get_state(request).health()
        if status is Health.OK:
            return json_response({"status": status.value})
        # Answered, not raised: a probe's 503 is the server's state, not a request error for the metrics.
        return APIError(503, f"not ready: {status.value}", ErrorType.UNAVAILABLE, None, status.value,
                        {"Retry-After": "5"}).to_response()

    @router.get("/health_generate", response_model=None, include_in_schema=False)
    async def health_generate(request: Request) -> Response:
        return await health(request)

    @router.get("/metrics", response_model=None)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics."""
        body = get_state(request).metrics.render()
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    return router


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with the request-body models that routes read themselves."""
    if app.openapi_schema is None:
        doc = get_openapi(title="sprig", version="0.1.0", routes=app.routes,
                          description="OpenAI-compatible and SGLang-native LLM serving")
        components = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in BODY_MODELS:
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            components[model.__name__] = schema
        app.openapi_schema = doc
    return app.openapi_schema


def _on_error(state: ServerState) -> Callable[[APIError], None]:
    def count(error: APIError) -> None:
        state.metrics.errors.labels(error.type.value, str(error.code)).inc()

    return count


async def _load(state: ServerState, factory: EngineFactory, on_ready: Callable[[ServerState], None] | None,
                on_failed: Callable[[Exception], None] | None) -> None:
    try:
        state.engine = await asyncio.to_thread(factory)
    except Exception as e:  # noqa: BLE001 - reported once, and the process exits non-zero
        state.load_error = describe(e)
        if on_failed is None:
            logger.error("the model failed to load: %s", state.load_error, exc_info=not isinstance(e, USER_ERRORS))
        else:
            on_failed(e)  # the command line says it, in one line
        return
    # Every full collection walks the whole heap holding the GIL (0.1-0.7 s measured with SmolLM2 loaded, the event
    # loop and /health stalled meanwhile); what start-up built lives for good, so later collections skip it.
    gc.freeze()
    if on_ready is not None:
        on_ready(state)


def create_app(settings: ServerSettings, auth: Authenticator | None = None, engine_factory: EngineFactory | None = None,
               engine: Any = None, model_path: str | None = None,
               on_ready: Callable[[ServerState], None] | None = None,
               on_failed: Callable[[Exception], None] | None = None) -> FastAPI:
    """Build the app over an engine (given, or made by `engine_factory` in a thread at startup)."""
    state = ServerState(settings, auth or Authenticator(), model_path=model_path, engine=engine)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loading = None
        if state.engine is None and engine_factory is not None:
            loading = asyncio.get_running_loop().create_task(_load(state, engine_factory, on_ready, on_failed))
        elif on_ready is not None:
            on_ready(state)
        try:
            yield
        finally:
            if loading is not None and not loading.done():
                loading.cancel()
            if state.engine is not None and engine_factory is not None:
                await asyncio.to_thread(state.engine.shutdown)
            gc.unfreeze()  # why: objects left frozen at exit are never freed, and nanobind (triton) lists each one

    app = FastAPI(title="sprig", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.sprig = state
    install_error_handlers(app, _on_error(state))
    app.include_router(ops_router())
    protected = APIRouter(dependencies=[Depends(authenticate)])
    protected.include_router(openai_router())
    protected.include_router(native_router())
    protected.include_router(lora_router())

    @protected.get("/openapi.json", include_in_schema=False)
    async def openapi_json() -> Response:
        return json_response(_openapi(app))

    app.include_router(protected)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app
