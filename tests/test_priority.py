"""`priority` is honoured end to end: on /generate, on the OpenAI routes (an extra body field) and in the DSL
(`gen(priority=)`, `run(priority=)`), with every backend. Each test holds the only running slot
(`max_running_requests=1`) with a long blocker, queues calls in rising priority order, then aborts the blocker:
the calls must finish highest priority first, not in arrival order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from test_server_helpers import BASE_ARGS, ServerProcess, tiny_model

import sprig
from sprig import Engine
from sprig.lang import OpenAICompatible, RuntimeEndpoint

LONG = {"max_new_tokens": 1500, "temperature": 0, "ignore_eos": True}
# Long enough that the engine finishes them well apart: the test observes the order from the client side.
SHORT = {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--max-running-requests", "1") as s:
        yield s


@pytest.fixture(scope="module")
def engine():
    opts = dict(zip(BASE_ARGS[::2], BASE_ARGS[1::2], strict=True))
    with Engine(tiny_model(), dtype=opts["--dtype"], max_total_tokens=int(opts["--max-total-tokens"]),
                num_threads=1, random_seed=0, max_running_requests=1) as e:
        yield e


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def finish_order(blocker: Iterator[Any], calls: list[tuple[str, Callable[[], Any]]],
                 waiting: Callable[[], int]) -> list[str]:
    """Labels of `calls` in the order they finished, each queued behind the running `blocker` in list order."""
    next(blocker)  # the blocker is running and holds the only slot
    done: list[str] = []
    errors: list[BaseException] = []

    def call(label: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
            done.append(label)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = []
    for label, fn in calls:
        threads.append(threading.Thread(target=call, args=(label, fn)))
        threads[-1].start()
        wait_for(lambda: waiting() == len(threads) or bool(errors))  # queued in this order
    blocker.close()  # type: ignore[attr-defined] - aborting it frees the slot: the queue goes in priority order
    for t in threads:
        t.join(60)
    assert not errors, errors
    return done


def http_blocker(url: str) -> Iterator[None]:
    with httpx.Client(base_url=url, timeout=60) as c, c.stream(
            "POST", "/generate", json={"text": "block", "sampling_params": LONG, "stream": True}) as resp:
        for _ in resp.iter_lines():
            yield


def server_waiting(url: str) -> Callable[[], int]:
    return lambda: httpx.get(url + "/server_info").json()["waiting"]


def test_generate_and_openai_routes_are_scheduled_by_priority(server):
    def native(priority: int | None) -> Callable[[], Any]:
        body: dict[str, Any] = {"text": "a", "sampling_params": SHORT}
        if priority is not None:
            body["priority"] = priority
        return lambda: httpx.post(server.url + "/generate", json=body, timeout=60).raise_for_status()

    def openai(route: str, priority: int) -> Callable[[], Any]:
        body: dict[str, Any] = {"max_tokens": 48, "temperature": 0, "priority": priority,
                                **({"prompt": "b"} if route == "completions" else
                                   {"messages": [{"role": "user", "content": "b"}]})}
        return lambda: httpx.post(f"{server.url}/v1/{route}", json=body, timeout=60).raise_for_status()

    order = finish_order(http_blocker(server.url), [
        ("default", native(None)), ("completions 2", openai("completions", 2)),
        ("generate 5", native(5)), ("chat 9", openai("chat/completions", 9))], server_waiting(server.url))
    assert order == ["chat 9", "generate 5", "completions 2", "default"]


def test_a_bad_priority_is_a_400(server):
    resp = httpx.post(server.url + "/generate", json={"text": "a", "priority": 2**40, "sampling_params": SHORT})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "priority"
    resp = httpx.post(server.url + "/v1/completions", json={"prompt": "a", "priority": "high"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "priority"


@sprig.function
def answer(s, label):
    s += label + ":"
    s += sprig.gen("out", max_tokens=48, temperature=0, ignore_eos=True)


@sprig.function
def answer_urgently(s, label):
    s += label + ":"
    s += sprig.gen("out", max_tokens=48, temperature=0, ignore_eos=True, priority=7)


def dsl_calls(backend: Any) -> list[tuple[str, Callable[[], Any]]]:
    return [("run default", lambda: answer.run(label="a", backend=backend)),
            ("run 3", lambda: answer.run(label="b", backend=backend, priority=3)),
            ("gen 7", lambda: answer_urgently.run(label="c", backend=backend, priority=1))]


def test_dsl_priority_with_the_local_engine(engine):
    blocker = engine.generate("block", LONG, stream=True)
    order = finish_order(blocker, dsl_calls(sprig.LocalBackend(engine)), lambda: engine.stats()["waiting"])
    assert order == ["gen 7", "run 3", "run default"]


@pytest.mark.parametrize("kind", ["runtime_endpoint", "openai"])
def test_dsl_priority_over_http(server, kind):
    backend = RuntimeEndpoint(server.url) if kind == "runtime_endpoint" else OpenAICompatible(server.url + "/v1")
    try:
        order = finish_order(http_blocker(server.url), dsl_calls(backend), server_waiting(server.url))
    finally:
        backend.close()
    assert order == ["gen 7", "run 3", "run default"]
