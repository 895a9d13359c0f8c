"""Run-time LoRA adapter management, SGLang's routes: `POST /load_lora_adapter` {"lora_name", "lora_path"} and
`POST /unload_lora_adapter` {"lora_name"}, for admin keys (behind the API key like every protected route: 401
without it). A path outside `--lora-roots` is a 403, a bad adapter a 400 naming it (and the module), an unknown
name a 404. Unloading answers once the adapter's running requests have finished; new ones get a 404 meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from pydantic import Field
from starlette.responses import Response

from sprig.runtime.engine.engine import Engine
from sprig.runtime.server.auth import forbidden
from sprig.runtime.server.http_common import APIError, body_spec, from_value_error, json_response, read_model
from sprig.runtime.server.openai_protocol import StrictModel
from sprig.runtime.server.state import get_state, tenant_of

UNLOAD_WAIT_S = 600.0  # how long an unload waits for the adapter's running requests before answering 503
T = TypeVar("T")


class LoadLoraAdapterRequest(StrictModel):
    """POST /load_lora_adapter (SGLang's LoadLoRAAdapterReqInput)."""

    lora_name: str = Field(min_length=1, max_length=128)
    lora_path: str = Field(min_length=1, max_length=4096)


class UnloadLoraAdapterRequest(StrictModel):
    """POST /unload_lora_adapter (SGLang's UnloadLoRAAdapterReqInput)."""

    lora_name: str = Field(min_length=1, max_length=128)


B = TypeVar("B", LoadLoraAdapterRequest, UnloadLoraAdapterRequest)


def lora_router() -> APIRouter:
    """The authenticated adapter routes."""
    router = APIRouter()

    @router.post("/load_lora_adapter", openapi_extra=body_spec(LoadLoraAdapterRequest), response_model=None)
    async def load_lora_adapter(request: Request) -> Response:
        """Read a PEFT adapter from a folder under --lora-roots and serve it by name."""
        engine, body = await _admin_call(request, LoadLoraAdapterRequest, "loading")
        await _run(engine.lora.load, body.lora_name, body.lora_path)
        return _loaded(engine)

    @router.post("/unload_lora_adapter", openapi_extra=body_spec(UnloadLoraAdapterRequest), response_model=None)
    async def unload_lora_adapter(request: Request) -> Response:
        """Stop serving an adapter; answers once its running requests have finished."""
        engine, body = await _admin_call(request, UnloadLoraAdapterRequest, "unloading")
        if not await _run(engine.lora.unload, body.lora_name, UNLOAD_WAIT_S):
            raise APIError(503, f"adapter {body.lora_name} is unloading: its running requests have not finished",
                           code="lora_busy")
        return _loaded(engine)

    return router


async def _admin_call(request: Request, model: type[B], doing: str) -> tuple[Engine, B]:
    """The engine and the validated body of an adapter route, for admin keys only."""
    state = get_state(request)
    engine = state.ready_engine()
    if not tenant_of(request).admin:
        raise forbidden(f"{doing} LoRA adapters needs an admin API key")
    return engine, await read_model(request, model, state.settings.max_request_bytes)


async def _run(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread; a LoraError becomes its status (400, 403 or 404)."""
    try:
        return await asyncio.to_thread(fn, *args)
    except ValueError as e:
        raise from_value_error(e) from None


def _loaded(engine: Engine) -> Response:
    return json_response({"success": True, "error_message": "", "loaded_adapters": engine.lora.adapters()})
