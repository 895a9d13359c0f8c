"""What every route module shares: reading request bodies, the server state of a request, its tenant, responses.

Bodies are read here rather than by FastAPI so that the size limit (413) is enforced while reading (never
buffering an oversized body first), `NaN`/`Infinity` literals and non-object bodies are refused (orjson rejects
them), and every failure becomes a 400 with the OpenAI error body.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from sprig.runtime.server.auth import Tenant
from sprig.runtime.server.http_errors import (
    APIError,
    ClientGone,
    ErrorType,
    bad_request,
    from_validation_error,
)
from sprig.runtime.server.state import ServerState

M = TypeVar("M", bound=BaseModel)

_JSON_TYPES = ("application/json",)


def _check_content_type(request: Request) -> None:
    ctype = request.headers.get("content-type")
    if ctype is None:
        return  # why: curl and many scripts send JSON without a content type
    media = ctype.split(";", 1)[0].strip().lower()
    if media in _JSON_TYPES or media.endswith("+json"):
        return
    raise APIError(415, f"unsupported content type {media[:64]!r}; send application/json",
                   ErrorType.INVALID_REQUEST, None, "unsupported_media_type")


def _too_large(limit: int) -> APIError:
    return APIError(413, f"request body exceeds {limit} bytes", ErrorType.INVALID_REQUEST, None,
                    "request_too_large")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing one over `limit` bytes before reading it (Content-Length) or while reading it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit() or len(declared) > 18:
            raise bad_request("invalid Content-Length header", None, "invalid_header")
        if int(declared) > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(chunks)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Parse a JSON object; anything else (invalid JSON, NaN, arrays, strings) is a 400."""
    if not raw.strip():
        raise bad_request("the request body is empty; send a JSON object", None, "invalid_json")
    try:
        data = orjson.loads(raw)
    except (orjson.JSONDecodeError, RecursionError) as e:
        raise bad_request(f"the request body is not valid JSON: {str(e)[:160]}", None, "invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object", None, "invalid_json")
    return data


def validate_model(model: type[M], data: dict[str, Any]) -> M:
    """Validate a parsed body against a protocol model; errors name the field (`param`)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e) from None
    except RecursionError:  # why: absurdly nested bodies must be a 400, not a crash
        raise bad_request("the request body is nested too deeply", None, "invalid_json") from None


async def read_model(request: Request, model: type[M], limit: int) -> M:
    """Read, parse and validate a JSON request body in one step."""
    _check_content_type(request)
    return validate_model(model, parse_json_object(await read_body(request, limit)))


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


def safe_decode(tok: Any, ids: list[int]) -> str:
    """The text of `ids`, or "" for ids the tokenizer cannot decode (the engine's validation reports those)."""
    try:
        return tok.decode(ids, skip_special_tokens=False)
    except Exception:  # noqa: BLE001 - out-of-vocab ids are reported by the engine's validation
        return ""


class TokenTexts:
    """Text of single tokens (cached): what logprob entries show for each token id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.cache.get(token_id)
        if text is None:
            text = safe_decode(self.tokenizer, [token_id])
            if len(self.cache) < 1 << 18:
                self.cache[token_id] = text
        return text


def state_texts(state: ServerState) -> TokenTexts:
    """The per-server token-text cache (created with the engine)."""
    if state.token_texts is None:
        state.token_texts = TokenTexts(state.ready_engine().tokenizer)
    return state.token_texts
