"""The overlap schedule (the next step planned and the last step's stop checks run while the forward runs) changes
when work happens, never what is generated: constrained, penalized, seeded, stopped, streamed and aborted requests
come out as they do with steps one after another, and no KV page leaks."""

from __future__ import annotations

import json
import threading

import pytest
from test_engine_soak import assert_every_page_has_one_owner

from sprig import Engine
from sprig.runtime.engine.schedule import Schedule
from sprig.runtime.engine.summary import engine_facts

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "n"], "additionalProperties": False}
OPTIONS = {"dtype": "float32", "num_threads": 1, "random_seed": 0, "max_total_tokens": 2048}


def _mixed_params() -> list[dict]:
    """Unconstrained, json_schema, regex and choices rows, greedy and seeded, with penalties and stops."""
    params: list[dict] = []
    for i in range(16):
        base = {"max_new_tokens": 24, "temperature": 0.0} if i % 2 else {"max_new_tokens": 24, "temperature": 0.9,
                                                                          "seed": 100 + i}
        kind = i % 4
        if kind == 1:
            base["json_schema"] = json.dumps(SCHEMA)
            base["max_new_tokens"] = 60
        elif kind == 2:
            base["regex"] = "[a-z]{2,6}( [a-z]{2,6}){0,3}"
        elif kind == 3 and i % 8 == 3:
            base["choices"] = ["alpha", "beta gamma", "delta"]
        elif kind == 3:
            base.update(frequency_penalty=0.5, presence_penalty=0.3, repetition_penalty=1.2)
        else:
            base["stop"] = ["e", "th"]
        params.append(base)
    return params


def _run(path: str, overlap: bool, **extra: object) -> list[dict]:
    prompts = [f"request {i}: the quick brown fox" for i in range(16)]
    with Engine(path, enable_overlap_schedule=overlap, **OPTIONS, **extra) as engine:
        assert (engine.core.schedule.schedule is Schedule.OVERLAP) == overlap == (engine.core.schedule.overlap_off is None)
        out = engine.generate(prompts, _mixed_params(), return_logprob=True, logprob_start_len=2,
                              top_logprobs_num=2)
        stats = engine.stats()
        assert_every_page_has_one_owner(engine)
    assert stats["running"] == 0 and stats["cache_protected_tokens"] == 0
    return out


def test_every_kind_of_request_generates_the_same_with_overlap(tiny_paths):
    path = str(tiny_paths["tiny-llama"])
    serial, overlapped = _run(path, False), _run(path, True)
    for a, b in zip(serial, overlapped, strict=True):
        assert b["output_ids"] == a["output_ids"]
        assert b["text"] == a["text"]
        assert b["meta_info"]["finish_reason"] == a["meta_info"]["finish_reason"]
        # Same logits, same order of sampling: the logprobs agree to float32 rounding.
        for key in ("output_token_logprobs", "input_token_logprobs"):
            for x, y in zip(a["meta_info"][key], b["meta_info"][key], strict=True):
                assert y[1] == x[1] and (x[0] is None or abs(y[0] - x[0]) < 1e-5)
    reasons = {o["meta_info"]["finish_reason"]["type"] for o in overlapped}
    assert reasons == {"stop", "length"}


def test_a_streamed_request_gets_all_its_text_once(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), enable_overlap_schedule=True, **OPTIONS) as engine:
        whole = engine.generate("Once upon a time", {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True})
        chunks = list(engine.generate("Once upon a time", {"max_new_tokens": 32, "temperature": 0.0,
                                                           "ignore_eos": True}, stream=True))
    assert chunks[-1]["text"] == whole["text"] and chunks[-1]["output_ids"] == whole["output_ids"]
    assert len(chunks) > 4  # streamed step by step, not all at the end


def test_aborts_while_steps_are_in_flight_leak_nothing(tiny_paths):
    """Requests aborted from another thread at random points (often while their step runs or their token waits
    for its stop checks) end as `abort`; the rest finish with the tokens steps one after another give; every page
    is free or owned by the tree."""
    prompts = [f"prompt {i} " * (1 + i % 5) for i in range(24)]
    greedy = {"max_new_tokens": 40, "temperature": 0.0, "ignore_eos": True}
    small = {**OPTIONS, "max_total_tokens": 512}
    with Engine(str(tiny_paths["tiny-llama"]), **small) as engine:
        expected = [o["output_ids"] for o in engine.generate(prompts, greedy)]
    with Engine(str(tiny_paths["tiny-llama"]), enable_overlap_schedule=True, max_running_requests=24,
                **small) as engine:
        streams = [engine.generate(p, greedy, stream=True, rid=f"r{i}") for i, p in enumerate(prompts)]
        aborter = threading.Timer(0.05, lambda: [engine.abort(f"r{i}") for i in range(0, 24, 3)])
        aborter.start()
        finals = [list(s)[-1] for s in streams]
        aborter.join()
        stats = engine.stats()
        assert_every_page_has_one_owner(engine)
    types = [f["meta_info"]["finish_reason"]["type"] for f in finals]
    assert types.count("length") >= 16 and set(types) <= {"length", "abort"}
    assert all(f["output_ids"] == want for f, t, want in zip(finals, types, expected, strict=True) if t == "length")
    assert stats["running"] == stats["waiting"] == 0 and stats["cache_protected_tokens"] == 0


def test_overlap_is_off_on_the_cpu_unless_enabled_and_says_why(tiny_paths):
    path = str(tiny_paths["tiny-llama"])
    with Engine(path, **OPTIONS) as engine:
        assert dict(engine_facts(engine.core))["overlap schedule"].startswith("off (off by default on the CPU")
    with Engine(path, enable_overlap_schedule=True, **OPTIONS) as engine:
        assert dict(engine_facts(engine.core))["overlap schedule"] == "on"


@pytest.mark.parametrize(("options", "message"), [
    ({"enable_overlap_schedule": True, "disable_overlap_schedule": True}, "contradict"),
    ({"enable_overlap_schedule": True, "speculative_algorithm": "ngram"}, "speculative_algorithm"),
    ({"enable_overlap_schedule": True, "enable_hierarchical_cache": True}, "enable_hierarchical_cache"),
])
def test_conflicting_overlap_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Engine(None, **options)
