"""`sprig router`: one HTTP front for several `sprig serve` replicas (data parallelism).

The router speaks the same API as a single server: generation routes (`/generate`, `/v1/completions`,
`/v1/chat/completions`) are proxied to the replica the policy picks (`policy.py`), streams pass through chunk
by chunk; `/v1/models`, `/model_info` and `/get_model_info` come from any healthy replica; `/flush_cache` (and
vLLM's `/reset_prefix_cache`) goes to all of them with its `timeout`; `/health`, `/server_info` and `/metrics`
describe the router and its replicas. `Authorization` is passed through, so replicas started with `--api-key` keep
enforcing it.

Failures: a replica that refuses the connection never received the request, so the request goes to the next
replica and nothing is lost; a replica that fails after the request was sent (it crashed mid-generation) makes that
request fail with a 502 naming the replica, or, on a stream already started, an SSE error event and `[DONE]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sprig.runtime.router.policy import PolicyConfig, RoutingKey, Selector, routing_key
from sprig.runtime.router.workers import HealthSettings, WorkerPool

logger = logging.getLogger(__name__)

GENERATION_ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")
REQUEST_HEADERS = ("authorization", "content-type", "accept", "x-request-id")
RESPONSE_HEADERS = ("content-type", "retry-after", "x-request-id")
SSE_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class RouterSettings:
    """Options of `sprig router`."""

    workers: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 30000
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    health: HealthSettings = field(default_factory=HealthSettings)
    max_request_bytes: int = 4 << 20
    connect_timeout: float = 5.0
    request_timeout: float | None = None  # longest wait for a replica's next bytes; None: no limit


def error_body(status: int, message: str, code: str, kind: str = "server_error") -> bytes:
    """An OpenAI-style error object, like the replicas' own."""
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


def error_response(status: int, message: str, code: str, kind: str = "server_error") -> Response:
    return Response(error_body(status, message, code, kind), status, media_type="application/json")


class Router:
    """The proxy: holds the replicas, the HTTP client to them, and the route handlers."""

    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings
        self.pool = WorkerPool(list(settings.workers), Selector(settings.policy, len(settings.workers)),
                               settings.health)
        self.client: httpx.AsyncClient | None = None
        self.requests = 0
        self.retried = 0  # requests re-sent because a replica refused the connection
        self.failed = 0  # requests lost with a replica that failed while serving them
        self.matched_bytes = 0
        self.key_bytes = 0

    # --- lifecycle --------------------------------------------------------------------------------------------------
    @asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        timeout = httpx.Timeout(self.settings.request_timeout, connect=self.settings.connect_timeout)
        # No keep-alive: on a fresh connection a dead replica refuses (the request was never sent, so it is retried
        # elsewhere); a reused connection to it would fail only after the request was written, like one in flight.
        limits = httpx.Limits(max_connections=4096, max_keepalive_connections=0)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)
        await self.pool.check_all(self.client)
        checker = asyncio.get_running_loop().create_task(self.pool.run_health_checks(self.client))
        try:
            yield
        finally:
            checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checker
            await self.client.aclose()

    def app(self) -> Starlette:
        routes = [Route(path, self.generate, methods=["POST"]) for path in GENERATION_ROUTES]
        routes += [Route(p, self.forward_any, methods=["GET"])
                   for p in ("/v1/models", "/model_info", "/get_model_info")]
        routes += [Route("/flush_cache", self.flush_cache, methods=["POST", "GET"]),
                   Route("/reset_prefix_cache", self.flush_cache, methods=["POST"]),  # vLLM's name
                   Route("/health", self.health, methods=["GET"]),
                   Route("/health_generate", self.health, methods=["GET"]),
                   Route("/server_info", self.server_info, methods=["GET"]),
                   Route("/metrics", self.metrics, methods=["GET"])]
        app = Starlette(routes=routes, lifespan=self.lifespan)
        app.state.router = self
        return app

    # --- generation -------------------------------------------------------------------------------------------------
    async def generate(self, request: Request) -> Response:
        """Proxy a generation request to the chosen replica, retrying elsewhere only if it was never sent."""
        body = await request.body()
        if len(body) > self.settings.max_request_bytes:
            return error_response(413, f"the request body exceeds {self.settings.max_request_bytes} bytes",
                                  "request_too_large", "invalid_request_error")
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None  # the replica answers the 400 itself
        key = routing_key(request.url.path, parsed)
        self.requests += 1
        return await self._dispatch(request, body, key)

    async def _dispatch(self, request: Request, body: bytes, key: RoutingKey) -> Response:
        assert self.client is not None
        tried: set[int] = set()
        headers = {h: request.headers[h] for h in REQUEST_HEADERS if h in request.headers}
        while True:
            choice = self.pool.choose(key, tried)
            if choice is None:
                return error_response(503, "no healthy worker is available", "no_healthy_worker",
                                      "service_unavailable")
            worker = self.pool.workers[choice.index]
            upstream = self.client.build_request("POST", worker.url + request.url.path, content=body,
                                                 headers=headers, params=request.query_params)
            worker.in_flight += 1
            try:
                resp = await self.client.send(upstream, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:  # never reached the replica: try another
                worker.in_flight -= 1
                tried.add(choice.index)
                self.retried += 1
                self.pool.mark_down(choice.index, f"connection failed: {e}")
                continue
            except httpx.HTTPError as e:
                worker.in_flight -= 1
                return self._lost(choice.index, e)
            if resp.status_code == 503 and self._others_left(tried | {choice.index}):
                worker.in_flight -= 1  # why: a draining or overloaded replica did no work; another may
                await resp.aclose()
                tried.add(choice.index)
                self.retried += 1
                continue
            worker.routed += 1
            self.matched_bytes += choice.matched
            self.key_bytes += len(key.tokens)
            return await self._relay(choice.index, resp)

    def _others_left(self, tried: set[int]) -> bool:
        return any(i not in tried for i in self.pool.healthy())

    async def _relay(self, index: int, resp: httpx.Response) -> Response:
        """Pass the replica's answer on: streamed when it streams, whole otherwise."""
        headers = {h: resp.headers[h] for h in RESPONSE_HEADERS if h in resp.headers}
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(self._stream(index, resp), resp.status_code, headers)
        worker = self.pool.workers[index]
        try:
            content = await resp.aread()
        except httpx.HTTPError as e:
            return self._lost(index, e)
        finally:
            worker.in_flight -= 1
            await resp.aclose()
        return Response(content, resp.status_code, headers)

    async def _stream(self, index: int, resp: httpx.Response) -> AsyncIterator[bytes]:
        worker = self.pool.workers[index]
        try:
            async for chunk in resp.aiter_raw():
                yield chunk
        except httpx.HTTPError as e:
            self._lost(index, e)
            message = self._lost_message(index, e)
            yield b"data: " + error_body(502, message, "worker_failed") + b"\n\n" + SSE_DONE
        finally:
            worker.in_flight -= 1
            await resp.aclose()

    def _lost_message(self, index: int, error: Exception) -> str:
        url = self.pool.workers[index].url
        return f"worker {url} failed while serving the request ({type(error).__name__}: {error}); it was not retried"

    def _lost(self, index: int, error: Exception) -> Response:
        """A request the replica received and did not finish: count it, report 502."""
        self.failed += 1
        self.pool.workers[index].failed_in_flight += 1
        return error_response(502, self._lost_message(index, error), "worker_failed")

    # --- other routes -----------------------------------------------------------------------------------------------
    async def forward_any(self, request: Request) -> Response:
        """GET a read-only route from any healthy replica."""
        assert self.client is not None
        headers = {h: request.headers[h] for h in REQUEST_HEADERS if h in request.headers}
        for index in self.pool.healthy():
            url = self.pool.workers[index].url + request.url.path
            try:
                resp = await self.client.get(url, headers=headers, params=request.query_params)
            except httpx.HTTPError as e:
                self.pool.mark_down(index, f"{type(e).__name__}: {e}")
                continue
            return Response(resp.content, resp.status_code,
                            {h: resp.headers[h] for h in RESPONSE_HEADERS if h in resp.headers})
        return error_response(503, "no healthy worker is available", "no_healthy_worker", "service_unavailable")

    async def flush_cache(self, request: Request) -> Response:
        """Flush every healthy replica's prefix cache (and the router's guesses of them)."""
        client = self.client
        assert client is not None
        headers = {h: request.headers[h] for h in REQUEST_HEADERS if h in request.headers}
        healthy = self.pool.healthy()

        async def flush(index: int) -> tuple[str, int | str]:
            url = self.pool.workers[index].url
            try:
                resp = await client.post(f"{url}/flush_cache", headers=headers, params=request.query_params)
                return url, resp.status_code
            except httpx.HTTPError as e:
                return url, f"{type(e).__name__}: {e}"

        results = dict(await asyncio.gather(*(flush(i) for i in healthy)))
        for i in healthy:
            self.pool.selector.forget(i)
        ok = bool(results) and all(code == 200 for code in results.values())
        return Response(orjson.dumps({"flushed": ok, "workers": results}), 200 if ok else 400,
                        media_type="application/json")

    async def health(self, request: Request) -> Response:
        healthy = len(self.pool.healthy())
        if healthy:
            return Response(orjson.dumps({"status": "ok", "healthy_workers": healthy}), media_type="application/json")
        return error_response(503, "not ready: no healthy worker", "no_healthy_worker", "service_unavailable")

    def stats(self) -> dict[str, Any]:
        """Router counters and the replicas' states."""
        return {**self.pool.stats(), "requests": self.requests, "retried": self.retried, "failed": self.failed,
                "estimated_cache_hit_rate": self.matched_bytes / self.key_bytes if self.key_bytes else 0.0}

    async def server_info(self, request: Request) -> Response:
        return Response(orjson.dumps({"router": self.stats()}), media_type="application/json")

    async def metrics(self, request: Request) -> Response:
        """Prometheus text: router counters and per-replica gauges."""
        lines = [f"sprig_router_requests_total {self.requests}", f"sprig_router_retried_total {self.retried}",
                 f"sprig_router_failed_total {self.failed}"]
        for w in self.pool.workers:
            label = f'{{worker="{w.url}"}}'
            lines += [f"sprig_router_worker_healthy{label} {int(w.status.value == 'healthy')}",
                      f"sprig_router_worker_in_flight{label} {w.in_flight}",
                      f"sprig_router_worker_routed_total{label} {w.routed}"]
        return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8")


def create_router_app(settings: RouterSettings) -> Starlette:
    """The router's ASGI app (the router object is `app.state.router`)."""
    if not settings.workers:
        raise ValueError("the router needs at least one worker URL")
    return Router(settings).app()
