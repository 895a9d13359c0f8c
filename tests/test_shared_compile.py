"""Requests asking for the same grammar share one compile; one of them giving up must not fail the others."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import Future

from sprig.grammar import GrammarSpec
from sprig.runtime.engine.engine import Engine

PATTERN = "(yes|no) [0-9]{2}"


def test_a_caller_timing_out_during_a_shared_compile_leaves_it_running_for_the_others(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"])) as engine:
        compiled = engine.core.grammar.submit(GrammarSpec.regex(PATTERN)).result(timeout=60)
        gate: Future = Future()  # the shared compile, finished by the test once the first caller gave up
        engine.core.grammar.submit = lambda spec: gate  # type: ignore[method-assign]
        params = {"regex": PATTERN, "max_new_tokens": 16, "temperature": 0}

        async def scenario() -> dict:
            impatient = asyncio.ensure_future(asyncio.wait_for(engine.async_generate("a", params), timeout=0.3))
            patient = asyncio.ensure_future(engine.async_generate("b", params))
            try:
                await impatient
                raise AssertionError("the impatient caller should have timed out")
            except asyncio.TimeoutError:
                pass
            assert not gate.cancelled()  # the first caller's cancellation did not reach the shared compile
            gate.set_result(compiled)
            return await asyncio.wait_for(patient, timeout=60)

        result = asyncio.run(scenario())
    assert result["meta_info"]["finish_reason"]["type"] in ("stop", "length")
    assert re.fullmatch(PATTERN, result["text"]) or result["meta_info"]["finish_reason"]["type"] == "length"
