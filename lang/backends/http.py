"""A small HTTP client shared by the remote backends: JSON calls, SSE streams and clear errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from sprig.lang.errors import BackendError

DEFAULT_TIMEOUT_S = 600.0


class HttpClient:
    """JSON over HTTP with an optional bearer key; every failure is a `BackendError` with one line."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Many program threads share one client; raise the pool limit so they don't queue on connections.
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, limits=limits)

    def get(self, path: str) -> Any:
        try:
            response = self._client.get(path)
        except httpx.HTTPError as e:
            raise BackendError(f"GET {self.base_url}{path} failed: {e}") from None
        return _json(response, path)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            response = self._client.post(path, json=body)
        except httpx.HTTPError as e:
            raise BackendError(f"POST {self.base_url}{path} failed: {e}") from None
        return _json(response, path)

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The JSON objects of a server-sent-event stream, until `[DONE]` or the end."""
        try:
            with self._client.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    _json(response, path)
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    event = json.loads(data)
                    if isinstance(event, dict) and "error" in event:
                        raise BackendError(f"{path}: {_message(event)}")
                    yield event
        except httpx.HTTPError as e:
            raise BackendError(f"POST {self.base_url}{path} failed: {e}") from None

    def close(self) -> None:
        self._client.close()


def _json(response: httpx.Response, path: str) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        detail = _message(body) if body is not None else response.text[:200]
        raise BackendError(f"{path} answered {response.status_code}: {detail}", status=response.status_code)
    if body is None:
        raise BackendError(f"{path} answered with a body that is not JSON")
    return body


def _message(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body))
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(body)[:200]
