"""Property-based API fuzzing: schemathesis generates valid and invalid requests from /openapi.json for every
operation (bounded examples, fixed seed); none may get a 5xx."""

from __future__ import annotations

import contextlib

import pytest
from test_server_helpers import ServerProcess, assert_no_kv_leak, wait_idle

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

EXAMPLES_PER_MODE = 12


@pytest.fixture(scope="module")
def server():
    # why: a short context and deadline keep fuzzed generations (n up to 64) cheap
    with ServerProcess("--context-length", "96", "--request-timeout", "3") as s:
        yield s


def _operations(url: str) -> list:
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


def _fuzz(operation, mode, url: str, failures: list[str]) -> None:
    from hypothesis import HealthCheck, Phase, given, settings

    @settings(max_examples=EXAMPLES_PER_MODE, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case) -> None:
        response = case.call(base_url=url, timeout=60)
        if response.status_code >= 500:
            failures.append(f"{case.method} {case.path} {mode.value}: {response.status_code} "
                            f"{response.text[:200]} <- {str(case.body)[:200]}")

    with contextlib.suppress(hypothesis.errors.Unsatisfiable):  # why: no-input operations have no invalid form
        check()


def test_no_operation_answers_5xx(server):
    from schemathesis import GenerationMode

    failures: list[str] = []
    operations = _operations(server.url)
    assert len(operations) >= 8
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(operation, mode, server.url, failures)
    assert not failures, "\n".join(failures[:10])
    assert_no_kv_leak(wait_idle(server.url, timeout=60))
