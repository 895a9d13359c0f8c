"""Server settings and the state shared by every route: the engine, readiness, admission, draining, token texts."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request

from sprig.runtime.model.named_models import served_name
from sprig.runtime.server.auth import Authenticator, RateLimited, Tenant
from sprig.runtime.server.http_common import APIError, ErrorType
from sprig.runtime.server.metrics import ServerMetrics

if TYPE_CHECKING:
    from sprig.runtime.engine.engine import Engine

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSettings:
    """Options of `sprig serve` that are about HTTP rather than the engine."""

    host: str = "127.0.0.1"
    port: int = 30000
    served_model_name: str | None = None  # default: the --model value, or the default model's name
    max_request_bytes: int = 4 << 20
    max_queued_requests: int = 1024
    max_sequences_per_request: int = 256
    request_timeout: float | None = None
    shutdown_timeout: float = 30.0
    watchdog_timeout: float = 60.0
    incremental_streaming_output: bool = False  # /generate streams send only what is new (SGLang's option)
    tool_call_parser: str | None = None  # the tool-call format (tool_formats.py); None: from the chat template


class StopCause(Enum):
    """Why a generation ended before the engine finished it."""

    DISCONNECTED = "disconnected"
    TIMEOUT = "timeout"
    SHUTDOWN = "shutdown"


class Stoppable(Protocol):
    """A generation in flight that shutdown can end (`run.GenerationRun`)."""

    def stop(self, cause: StopCause) -> None: ...


class Health(str, Enum):
    OK = "ok"
    LOADING = "loading"
    DRAINING = "draining"
    DEAD = "dead"
    STALLED = "stalled"
    FAILED = "failed"


@dataclass(eq=False)
class Ticket:
    """An admitted request's claim on the queue and on its tenant's limits; released exactly once."""

    state: ServerState
    tenant: Tenant
    sequences: int
    released: bool = False

    def release(self, generated_tokens: int) -> None:
        if self.released:
            return
        self.released = True
        self.state.inflight_sequences -= self.sequences
        self.tenant.release(generated_tokens)


@dataclass(eq=False)
class ServerState:
    """Everything routes share. Lives on `app.state.sprig`."""

    settings: ServerSettings
    auth: Authenticator
    model_path: str | None = None
    engine: Engine | None = None
    load_error: str | None = None
    draining: bool = False
    started: float = field(default_factory=time.time)
    inflight_sequences: int = 0
    runs: set[Stoppable] = field(default_factory=set)
    token_texts: TokenTexts | None = None  # the per-engine cache of single-token texts (logprob entries)
    metrics: ServerMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(lambda: self.engine)

    # --- identity -------------------------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        if self.settings.served_model_name:
            return self.settings.served_model_name
        return served_name(self.model_path)

    def check_model(self, name: str | None) -> None:
        """404 for a model this server does not serve (None: the default model)."""
        if name is None or name in (self.model_name, self.model_path, "default"):
            return
        raise APIError(404, f"the model {name[:128]!r} does not exist; this server serves {self.model_name!r}",
                       ErrorType.NOT_FOUND, "model", "model_not_found")

    def model_adapter(self, name: str | None) -> str | None:
        """The LoRA adapter an OpenAI `model` names: "NAME" (vLLM) or "BASE:NAME"; None for the base model. A name
        that is neither gets the 404 of `check_model` (an unknown adapter after "BASE:" gets the engine's 404)."""
        base, sep, adapter = (name or "").rpartition(":")
        if sep and adapter and base in (self.model_name, self.model_path, "default"):
            return adapter
        if name is not None and self.engine is not None and name in self.engine.lora.adapters():
            return name
        self.check_model(name)
        return None

    # --- readiness ------------------------------------------------------------------------------------------
    def health(self) -> Health:
        """Liveness from the engine's heartbeat, without a round trip to the engine thread."""
        if self.load_error is not None:
            return Health.FAILED
        if self.engine is None:
            return Health.LOADING
        if not self.engine.is_alive:
            return Health.DEAD
        busy = self.inflight_sequences > 0 or self.engine.has_work()
        if busy and time.monotonic() - self.engine.last_heartbeat > self.settings.watchdog_timeout:
            return Health.STALLED
        if self.draining:
            return Health.DRAINING
        return Health.OK

    def ready_engine(self) -> Engine:
        """The engine, or 503 while loading, after a failure, or while draining."""
        health = self.health()
        if health is Health.OK and self.engine is not None:
            return self.engine
        headers = {"Retry-After": "5"}
        if health is Health.DRAINING:
            headers = {"Connection": "close"}
        raise APIError(503, _UNAVAILABLE[health], ErrorType.UNAVAILABLE, None, health.value, headers)

    # --- admission ------------------------------------------------------------------------------------------
    def admit(self, tenant: Tenant, sequences: int, endpoint: str) -> Ticket:
        """Claim room for `sequences` before any work is done; 503 when the queue is full, 429 over a limit."""
        engine = self.ready_engine()
        running, _ = engine.load()  # why: a racy read is enough to bound the queue
        queued = max(0, self.inflight_sequences - running)
        if queued + sequences > self.settings.max_queued_requests:
            raise APIError(503, "the server is overloaded: too many queued requests, retry later",
                           ErrorType.OVERLOADED, None, "queue_full", {"Retry-After": "1"})
        try:
            tenant.admit()
        except RateLimited as e:
            self.metrics.tenant_rejected.labels(tenant.name, e.kind.value).inc()
            raise
        self.inflight_sequences += sequences
        self.metrics.requests.labels(endpoint).inc()
        self.metrics.tenant_requests.labels(tenant.name).inc()
        return Ticket(self, tenant, sequences)

    # --- shutdown -------------------------------------------------------------------------------------------
    def begin_drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop admitting; after the shutdown timeout, stop every run still going (finish_reason abort)."""
        if self.draining:
            return
        self.draining = True
        logger.info("draining: %d sequences in flight, shutdown timeout %.1fs", self.inflight_sequences,
                    self.settings.shutdown_timeout)
        loop.call_later(self.settings.shutdown_timeout, self.abort_all_runs)

    def abort_all_runs(self) -> None:
        for run in list(self.runs):
            run.stop(StopCause.SHUTDOWN)


_UNAVAILABLE = {
    Health.LOADING: "the model is loading",
    Health.FAILED: "the model failed to load",
    Health.DEAD: "the engine has stopped",
    Health.STALLED: "the engine is not making progress",
    Health.DRAINING: "the server is shutting down",
}


def get_state(request: Request) -> ServerState:
    return request.app.state.sprig


def tenant_of(request: Request) -> Tenant:
    tenant = getattr(request.state, "tenant", None)
    return tenant if tenant is not None else get_state(request).auth.anonymous


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
