"""`/health` and `/metrics` never wait behind engine work, and the engine wakes a loop's readers in batches.

The 1,000-stream measurement itself is a benchmark (benchmarks/health_under_load.py); these are the cheap,
deterministic parts of it: the probe routes read racy engine figures and never queue behind the engine thread,
the metrics come through `Engine.gauges()` alone, and one engine step that reports to many streams schedules one
callback on their event loop, not one per stream.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import httpx
import pytest

from sprig.runtime.engine.engine import Engine
from sprig.runtime.engine.gauges import EngineGauges, HiCacheGauges, SpecGauges
from sprig.runtime.engine.request import EMPTY_META, DeltaChannel, LoopWaker, StepDelta
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


def _delta(index: int) -> StepDelta:
    return StepDelta(index, [index], [f"<{index}>"], [], [], EMPTY_META, False)


def test_one_step_reporting_to_many_streams_schedules_one_callback_on_their_loop():
    loop = asyncio.new_event_loop()
    calls = []
    schedule = loop.call_soon_threadsafe

    def counted(callback, *args):
        calls.append(callback)
        return schedule(callback, *args)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        waker = LoopWaker(loop)

        async def read_all() -> list[list[StepDelta]]:
            channels = [DeltaChannel(waker) for _ in range(1000)]
            reporter = threading.Thread(target=lambda: [c.put(_delta(i)) for i, c in enumerate(channels)])
            reporter.start()  # the engine thread, while this loop is busy (it is: this coroutine runs)
            reporter.join()
            return await asyncio.gather(*(c.take_async() for c in channels))

        taken = loop.run_until_complete(read_all())
    finally:
        loop.close()
    assert len(calls) == 1
    assert [[d.ids for d in batch] for batch in taken] == [[[i]] for i in range(1000)]


def test_a_closed_loop_fails_every_later_put():
    loop = asyncio.new_event_loop()
    waker = LoopWaker(loop)
    channels = [DeltaChannel(waker) for _ in range(2)]
    loop.close()
    for i, channel in enumerate(channels):  # each caller learns it: the engine then aborts its request
        with pytest.raises(ConnectionError, match="event loop is closed"):
            channel.put(_delta(i))


def test_the_start_up_heap_is_frozen_once_the_model_loads():
    """A full garbage collection would walk everything start-up built while holding the GIL, stalling /health."""
    import gc

    engine = SimpleNamespace(gauges=_gauges, is_alive=True, has_work=lambda: False, last_heartbeat=0.0,
                             shutdown=lambda: None)
    app = create_app(ServerSettings(), engine_factory=lambda: engine)

    async def load() -> int:
        async with app.router.lifespan_context(app):
            while app.state.sprig.engine is None:
                await asyncio.sleep(0.01)
            return gc.get_freeze_count()

    gc.unfreeze()
    try:
        assert asyncio.run(load()) > 0
        assert gc.get_freeze_count() == 0  # thawed at shutdown: nothing is left unfreed at exit
    finally:
        gc.unfreeze()
