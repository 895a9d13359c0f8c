"""The replicas behind `sprig router`: their health (from `/health` polls and failed connections) and their load."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import httpx

from sprig.runtime.router.policy import Choice, RoutingKey, Selector

logger = logging.getLogger(__name__)


class WorkerStatus(str, Enum):
    STARTING = "starting"  # not answered a health check yet
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


@dataclass(eq=False)
class Worker:
    """One replica (`sprig serve` URL) and what the router knows about it."""

    url: str
    status: WorkerStatus = WorkerStatus.STARTING
    in_flight: int = 0
    routed: int = 0
    failed_in_flight: int = 0  # requests that were lost because the replica failed while serving them
    failed_checks: int = 0  # consecutive
    last_error: str | None = None
    since: float = field(default_factory=time.monotonic)

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "status": self.status.value, "in_flight": self.in_flight, "routed": self.routed,
                "failed_in_flight": self.failed_in_flight, "last_error": self.last_error}


@dataclass(frozen=True)
class HealthSettings:
    interval: float = 2.0  # seconds between polls of every replica's /health
    timeout: float = 5.0  # a poll slower than this counts as failed
    failures: int = 2  # consecutive failed polls before a replica is taken out (a refused connection: at once)


class WorkerPool:
    """The replicas, the selector over them, and the health-check loop. Used from one event loop."""

    def __init__(self, urls: list[str], selector: Selector, health: HealthSettings) -> None:
        self.workers = [Worker(url.rstrip("/")) for url in urls]
        self.selector = selector
        self.health = health
        self.reasons: dict[str, int] = {}

    def healthy(self) -> list[int]:
        return [i for i, w in enumerate(self.workers) if w.status is WorkerStatus.HEALTHY]

    def choose(self, key: RoutingKey, exclude: set[int]) -> Choice | None:
        """A healthy replica not in `exclude`, or None when there is none."""
        candidates = [i for i in self.healthy() if i not in exclude]
        if not candidates:
            return None
        choice = self.selector.choose(key, [w.in_flight for w in self.workers], candidates)
        self.reasons[choice.reason] = self.reasons.get(choice.reason, 0) + 1
        return choice

    # --- health -----------------------------------------------------------------------------------------------------
    def mark_down(self, index: int, reason: str) -> None:
        """Stop routing to a replica (a refused connection, failed polls); its cache is presumed lost."""
        worker = self.workers[index]
        worker.last_error = reason
        if worker.status is not WorkerStatus.UNHEALTHY:
            logger.warning("worker %s is unhealthy: %s", worker.url, reason)
            worker.status = WorkerStatus.UNHEALTHY
            worker.since = time.monotonic()
            self.selector.forget(index)

    def mark_up(self, index: int) -> None:
        worker = self.workers[index]
        worker.failed_checks = 0
        if worker.status is not WorkerStatus.HEALTHY:
            logger.info("worker %s is healthy", worker.url)
            worker.status = WorkerStatus.HEALTHY
            worker.since = time.monotonic()

    async def check(self, client: httpx.AsyncClient, index: int) -> None:
        """Poll one replica's /health once."""
        worker = self.workers[index]
        try:
            resp = await client.get(f"{worker.url}/health", timeout=self.health.timeout)
            ok, reason = resp.status_code == 200, f"/health answered {resp.status_code}"
        except httpx.ConnectError as e:
            self.mark_down(index, f"connection refused: {e}")
            return
        except httpx.HTTPError as e:
            ok, reason = False, f"{type(e).__name__}: {e}"
        if ok:
            self.mark_up(index)
            return
        worker.failed_checks += 1
        worker.last_error = reason
        if worker.status is WorkerStatus.HEALTHY and worker.failed_checks >= self.health.failures:
            self.mark_down(index, reason)  # why: a replica still loading stays STARTING, not unhealthy

    async def check_all(self, client: httpx.AsyncClient) -> None:
        await asyncio.gather(*(self.check(client, i) for i in range(len(self.workers))))

    async def run_health_checks(self, client: httpx.AsyncClient) -> None:
        """Poll every replica forever (cancelled at shutdown)."""
        while True:
            with contextlib.suppress(Exception):
                await self.check_all(client)
            await asyncio.sleep(self.health.interval)

    def stats(self) -> dict[str, Any]:
        return {"workers": [w.to_dict() for w in self.workers], "healthy_workers": len(self.healthy()),
                "policy": self.selector.config.policy.value, "decisions": dict(self.reasons),
                "tree_tokens": [ix.size for ix in self.selector.indexes]}
