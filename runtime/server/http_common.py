"""Helpers every route module shares: the server state of a request, its tenant, JSON responses, body specs."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from sprig.runtime.server.auth import Tenant
from sprig.runtime.server.openai_convert import TokenTexts
from sprig.runtime.server.state import ServerState


def body_spec(model: type) -> dict[str, Any]:
    """OpenAPI request-body reference for a route that reads its body itself."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def get_state(request: Request) -> ServerState:
    return request.app.state.sprig


def tenant_of(request: Request) -> Tenant:
    tenant = getattr(request.state, "tenant", None)
    return tenant if tenant is not None else get_state(request).auth.anonymous


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def state_texts(state: ServerState) -> TokenTexts:
    """The per-server token-text cache (created with the engine)."""
    if state.token_texts is None:
        state.token_texts = TokenTexts(state.ready_engine().tokenizer)
    return state.token_texts
