"""The HTTP edge every route shares: request bodies read and validated, and every error as an OpenAI body.

Every error the server sends is ``{"error": {"message", "type", "param", "code"}}`` (docs/architecture.md, "Errors").
Validation problems are 400 and never 500; messages carry no tracebacks, file paths or ``0x`` addresses.

Bodies are read here rather than by FastAPI so that the size limit (413) is enforced while reading (never
buffering an oversized body first), `NaN`/`Infinity` literals and non-object bodies are refused (orjson rejects
them), and every failure becomes a 400 with the OpenAI error body.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


# --- errors -------------------------------------------------------------------------------------------------
MAX_MESSAGE_CHARS = 400  # why: error text is echoed to clients and must stay bounded
MAX_LISTED_ERRORS = 3
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_PATH = re.compile(r"(?:/[\w.\-]+){2,}\.py\b")


class ErrorType(str, Enum):
    """The `type` of an error body."""

    INVALID_REQUEST = "invalid_request_error"
    AUTHENTICATION = "authentication_error"
    PERMISSION = "permission_error"
    NOT_FOUND = "not_found_error"
    RATE_LIMIT = "rate_limit_error"
    OVERLOADED = "overloaded_error"
    TIMEOUT = "timeout_error"
    SERVER = "server_error"
    UNAVAILABLE = "service_unavailable"


def sanitize(message: object) -> str:
    """Bound an error message and strip addresses and source paths from it."""
    text = _PATH.sub("<file>", _ADDRESS.sub("0x…", str(message)))
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


class APIError(Exception):
    """An error answered to the client with its HTTP status and an OpenAI error body."""

    def __init__(self, status: int, message: str, type: ErrorType = ErrorType.INVALID_REQUEST,
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = sanitize(message)
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The `{"error": {...}}` object."""
        return {"error": {"message": self.message, "type": self.type.value, "param": self.param,
                          "code": self.code}}

    def to_response(self) -> Response:
        return Response(orjson.dumps(self.body()), status_code=self.status, headers=self.headers,
                        media_type="application/json")


class ClientGone(Exception):
    """The client disconnected before its request could be answered (nobody reads the reply)."""


def bad_request(message: str, param: str | None = None, code: str | None = "invalid_request") -> APIError:
    """A 400 `invalid_request_error`."""
    return APIError(400, message, ErrorType.INVALID_REQUEST, param, code)


def from_value_error(error: ValueError) -> APIError:
    """A 400 from an engine/grammar validation error (`param` and `code` attributes; the engine names the fields
    as the client sent them, `FieldNames`)."""
    param = getattr(error, "param", None)
    message = getattr(error, "message", None) or str(error)
    code = getattr(error, "code", None) or "invalid_request"
    if code == "queue_full":
        return APIError(503, message, ErrorType.UNAVAILABLE, None, code, {"Retry-After": "1"})
    if code in _LORA_STATUS:  # runtime/model/lora_adapter.LoraError: an unknown adapter, a path outside the roots
        status = _LORA_STATUS[code]
        return APIError(status, message, _STATUS_TYPES[status], param, code)
    return bad_request(message, param, str(code))


def _loc_param(loc: tuple[Any, ...]) -> str | None:
    """Dotted field path of a pydantic error location, without pydantic's union-member tags."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(str(item))
        elif isinstance(item, str) and item.isidentifier() and not item[0].isupper() \
                and item not in _TYPE_TAGS:
            parts.append(item)
    return ".".join(parts) or None


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "literal", "enum", "function"})


def from_validation_error(error: ValidationError | RequestValidationError) -> APIError:
    """A 400 naming the first offending field; at most a few errors, each bounded (no input echo)."""
    errors = error.errors(include_input=False) if isinstance(error, ValidationError) else error.errors()
    shown = []
    for err in errors[:MAX_LISTED_ERRORS]:
        where = _loc_param(tuple(err.get("loc", ()))) or "body"
        shown.append(f"{where}: {str(err.get('msg', 'invalid'))[:120]}")
    more = f" (and {len(errors) - MAX_LISTED_ERRORS} more)" if len(errors) > MAX_LISTED_ERRORS else ""
    param = _loc_param(tuple(errors[0].get("loc", ()))) if errors else None
    return bad_request("; ".join(shown) + more, param, "invalid_type")


_LORA_STATUS = {"lora_not_found": 404, "lora_forbidden": 403}
_STATUS_TYPES = {401: ErrorType.AUTHENTICATION, 403: ErrorType.PERMISSION, 404: ErrorType.NOT_FOUND,
                 408: ErrorType.TIMEOUT, 429: ErrorType.RATE_LIMIT, 503: ErrorType.UNAVAILABLE}


def install_error_handlers(app: FastAPI, on_error: Callable[[APIError], None]) -> None:
    """Make every error leave as an OpenAI body; `on_error` sees each one (for metrics)."""

    async def api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, APIError)
        on_error(exc)
        return exc.to_response()

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        kind = _STATUS_TYPES.get(status, ErrorType.SERVER if status >= 500 else ErrorType.INVALID_REQUEST)
        err = APIError(status, str(exc.detail), kind, None, f"http_{status}", exc.headers)
        on_error(err)
        return err.to_response()

    async def validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        err = from_validation_error(exc)
        on_error(err)
        return err.to_response()

    async def client_gone(_: Request, exc: Exception) -> Response:
        err = APIError(499, "the client closed the connection", ErrorType.INVALID_REQUEST, None, "client_closed")
        on_error(err)
        return err.to_response()

    async def unexpected(_: Request, exc: Exception) -> Response:
        logger.exception("unhandled error", exc_info=exc)
        err = APIError(500, "internal server error", ErrorType.SERVER, None, "internal_error")
        on_error(err)
        return err.to_response()

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(ClientGone, client_gone)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)


# --- request bodies -----------------------------------------------------------------------------------------

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


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")
