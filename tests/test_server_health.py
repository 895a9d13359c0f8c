"""`/health` and `/metrics` never wait behind engine work, and the metrics come through `Engine.gauges()` alone.

The 1,000-stream measurement itself is a benchmark (benchmarks/health_under_load.py); these are its cheap,
deterministic parts.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import httpx

from sprig.runtime.engine.engine import Engine
from sprig.runtime.engine.gauges import EngineGauges, HiCacheGauges, SpecGauges
from sprig.runtime.server.app import create_app
from sprig.runtime.server.state import ServerSettings

PROBE_LIMIT_S = 5.0  # far above an idle answer (milliseconds); a probe that waited for the engine would hang


async def _get(client: httpx.AsyncClient, path: str) -> httpx.Response:
    return await asyncio.wait_for(client.get(path), PROBE_LIMIT_S)


def test_health_and_metrics_answer_while_the_engine_thread_is_stuck(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), max_total_tokens=1024) as engine:
        release, entered = threading.Event(), threading.Event()

        def stuck() -> None:  # the engine thread inside a long step
            entered.set()
            release.wait(30)

        engine._post(stuck)
        assert entered.wait(10)
        app = create_app(ServerSettings(), engine=engine)

        async def probe() -> tuple[int, int, str]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                health = await _get(client, "/health")
                metrics = await _get(client, "/metrics")
            return health.status_code, metrics.status_code, metrics.text

        try:
            health, metrics, text = asyncio.run(probe())
        finally:
            release.set()
    assert (health, metrics) == (200, 200)
    assert "sprig_kv_cache_total_tokens 1024.0" in text and "sprig_engine_alive 1.0" in text


def _gauges() -> EngineGauges:
    hicache = HiCacheGauges(7, 3, 100, 50, 0.5, 0.25, {"swap": 1, "recompute": 2}, {"host_full": 4}, 11)
    return EngineGauges(running=5, waiting=2, kv_total_tokens=1000, kv_free_tokens=750, prefix_cache_tokens=64,
                        prompt_tokens=40, cached_tokens=10, num_preemptions=1, steps=9,
                        grammar={"compiles": 3, "compile_time_s_total": 0.5}, spec=SpecGauges(0.5, 2.0, 4, 8, 4),
                        hicache=hicache)


def test_metrics_read_the_engine_through_its_public_gauges_only():
    engine = SimpleNamespace(gauges=_gauges, is_alive=True)  # nothing else: no `core` to reach into
    state = create_app(ServerSettings(), engine=engine).state.sprig
    text = state.metrics.render().decode()
    for line in ("sprig_num_requests_running 5.0", "sprig_num_requests_waiting 2.0",
                 "sprig_kv_cache_usage_ratio 0.25", "sprig_prefix_cache_tokens 64.0", "sprig_cache_hit_rate 0.25",
                 "sprig_num_preemptions_total 1.0", "sprig_engine_steps_total 9.0", "sprig_grammar_compile_seconds_count 3.0",
                 "sprig_spec_accept_length 2.0", 'sprig_cache_hit_tokens_total{tier="host"} 3.0',
                 'sprig_preemptions_by_mode_total{mode="recompute"} 2.0',
                 'sprig_hicache_fallbacks_total{reason="host_full"} 4.0', "sprig_hicache_host_tokens 11.0"):
        assert line in text, line
