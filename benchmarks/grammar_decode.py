"""Decode throughput with and without a JSON-schema constraint, and what jump-forward saves, for `grammar_bench.py`.

On the demo model (random weights, 4k vocabulary), one batch of `batch` requests at a time, in process:
  * overhead: the same batch decoding constrained by a schema with jump-forward off (every token sampled
    under a mask) and unconstrained (`ignore_eos`), each request as many tokens as its constrained twin, so
    both runs have the same batch size at every step. Throughput is generated tokens per second.
  * jump-forward: a schema with many fixed keys, decoded with jump-forward on and off; tokens saved are the
    tokens the grammar appended without a forward pass (`Engine.stats()["jump_forward_tokens"]`).
Each run is repeated `runs` times, alternating, and the medians are kept.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from sprig import Engine
from sprig.runtime.model.checkpoints import demo_model_path

# Bounded strings, enums, ranges: a random model finishes these in a few dozen tokens.
OVERHEAD_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "role": {"enum": ["admin", "editor", "viewer"]}, "score": {"type": "number", "minimum": 0, "maximum": 1},
    "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 10}},
    "active": {"type": "boolean"}}, "required": ["name", "age", "role", "score", "tags", "active"],
    "additionalProperties": False}
FIXED_KEYS_SCHEMA = {"type": "object", "properties": {
    f"configuration_field_{name}": {"type": "boolean"} for name in (
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
        "kilo", "lima", "mike", "november", "oscar", "papa")},
    "additionalProperties": False}
FIXED_KEYS_SCHEMA["required"] = list(FIXED_KEYS_SCHEMA["properties"])


def run(engine: Engine, prompts: list[str], params: dict[str, Any] | list[dict[str, Any]]
        ) -> tuple[float, list[int], int, int]:
    """(seconds, generated tokens per request, jump-forward tokens, engine steps) of one batched call."""
    per_request = params if isinstance(params, list) else [params] * len(prompts)
    before = engine.stats()
    t0 = time.perf_counter()
    outs = engine.generate(prompts, [dict(p, seed=i) for i, p in enumerate(per_request)])
    elapsed = time.perf_counter() - t0
    tokens = [o["meta_info"]["completion_tokens"] for o in outs]
    for p, o in zip(per_request, outs, strict=True):
        if "json_schema" in p:  # why: a benchmark of invalid output would be meaningless
            assert json.loads(o["text"]).keys() <= json.loads(p["json_schema"])["properties"].keys()
    after = engine.stats()
    return elapsed, tokens, after["jump_forward_tokens"] - before["jump_forward_tokens"], after["steps"] - before["steps"]


def prompts_for(batch: int) -> list[str]:
    return [f"Request {i}: write the record as JSON." for i in range(batch)]


def constraint_overhead(batch: int, runs: int) -> dict[str, Any]:
    prompts = prompts_for(batch)
    constrained = {"json_schema": json.dumps(OVERHEAD_SCHEMA), "temperature": 1.0, "max_new_tokens": 400}
    with Engine(str(demo_model_path()), dtype="float32", num_threads=1, disable_jump_forward=True,
                max_total_tokens=1 << 16, random_seed=0) as engine:
        run(engine, prompts, constrained)  # why: compile the grammar and warm both paths before timing
        _, lengths, _, _ = run(engine, prompts, constrained)
        # why: each unconstrained request decodes exactly as many tokens as its constrained twin (same seed,
        # same output), so both runs have the same batch size at every step
        free = [{"temperature": 1.0, "ignore_eos": True, "max_new_tokens": n} for n in lengths]
        run(engine, prompts, free)
        with_c, without = [], []
        for _ in range(runs):
            s, n, _, _ = run(engine, prompts, constrained)
            with_c.append(sum(n) / s)
            s, n, _, _ = run(engine, prompts, free)
            without.append(sum(n) / s)
    tps_c, tps_free = statistics.median(with_c), statistics.median(without)
    return {"batch": batch, "tokens_per_request": sum(lengths) / batch, "unconstrained_tok_s": tps_free,
            "constrained_tok_s": tps_c, "overhead_pct": (tps_free / tps_c - 1) * 100}


def jump_forward(batch: int, runs: int) -> dict[str, Any]:
    prompts = prompts_for(batch)
    params = {"json_schema": json.dumps(FIXED_KEYS_SCHEMA), "temperature": 1.0, "max_new_tokens": 600}
    out: dict[str, Any] = {"batch": batch, "fixed_keys": len(FIXED_KEYS_SCHEMA["properties"])}
    times: dict[bool, list[float]] = {True: [], False: []}
    engines = {jf: Engine(str(demo_model_path()), dtype="float32", num_threads=1, disable_jump_forward=not jf,
                          max_total_tokens=1 << 16, random_seed=0) for jf in (True, False)}
    try:
        for engine in engines.values():
            run(engine, prompts, params)  # warm-up and compile
        for _ in range(runs):
            for jf, engine in engines.items():
                s, tokens, jumped, steps = run(engine, prompts, params)
                times[jf].append(s)
                out[f"tokens_jf_{'on' if jf else 'off'}"] = sum(tokens) / batch
                out[f"steps_jf_{'on' if jf else 'off'}"] = steps
                if jf:
                    out["jump_forward_tokens_per_request"] = jumped / batch
    finally:
        for engine in engines.values():
            engine.shutdown()
    on, off = statistics.median(times[True]), statistics.median(times[False])
    out.update({"seconds_jf_on": on, "seconds_jf_off": off, "speedup": off / on,
                "forward_passes_saved_pct": out["jump_forward_tokens_per_request"] / out["tokens_jf_on"] * 100})
    return out
