"""Random schemas and random instances: the grammar must agree with the `jsonschema` validator.

A seeded generator builds small schemas from the supported keywords (nested objects and arrays, bounds,
lengths, patterns, enums, allOf/anyOf/oneOf/not) and a pool of instances (random values plus values
shaped like the schema). Each instance, serialized in schema order, is walked through the compiled grammar;
acceptance must equal `jsonschema.Draft202012Validator(...).is_valid(...)`. Instances stay shallow so the
nesting bound for unconstrained values never decides.
"""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
from grammar_helpers import walk

from sprig.grammar import GrammarError, GrammarSpec
from sprig.grammar.schema.ordering import SchemaOrderer

KEYS = ["a", "b", "c"]
WORDS = ["", "a", "ab", "abc", "b", "zz", "a\"b", "é", "x y"]


def scalar_schema(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["integer", "number", "string", "boolean", "null", "enum"])
    if kind == "integer":
        s: dict[str, Any] = {"type": "integer"}
        if rng.random() < 0.6:
            s["minimum"] = rng.randint(-5, 5)
        if rng.random() < 0.6:
            s["exclusiveMaximum"] = rng.randint(-2, 12)
        return s
    if kind == "number":
        return {"type": "number", "minimum": rng.choice([-1.5, 0, 0.25]), "maximum": rng.choice([0.75, 2, 10.5])}
    if kind == "string":
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["maxLength"] = rng.randint(0, 3)
        if rng.random() < 0.3:
            s["minLength"] = rng.randint(0, 2)
        if rng.random() < 0.3:
            s["pattern"] = rng.choice(["^a", "b", "^[a-c]*$", "c$"])
        return s
    if kind == "enum":
        return {"enum": rng.sample([1, 2.5, "a", "b", None, True, [1], {"a": 1}], rng.randint(1, 3))}
    return {"type": kind}


def schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rng.random()
    if depth >= 2 or roll < 0.35:
        return scalar_schema(rng)
    if roll < 0.6:
        props = {k: schema(rng, depth + 1) for k in rng.sample(KEYS, rng.randint(1, 3))}
        s: dict[str, Any] = {"type": "object", "properties": props,
                             "required": rng.sample(list(props), rng.randint(0, len(props)))}
        if rng.random() < 0.6:
            s["additionalProperties"] = rng.choice([False, {"type": "integer"}])
        return s
    if roll < 0.8:
        s = {"type": "array", "items": schema(rng, depth + 1), "maxItems": rng.randint(0, 3)}
        if rng.random() < 0.4:
            s["prefixItems"] = [scalar_schema(rng)]
        if rng.random() < 0.4:
            s["minItems"] = rng.randint(0, 2)
        return s
    combinator = rng.choice(["allOf", "anyOf", "oneOf", "not"])
    if combinator == "not":
        return {"not": scalar_schema(rng)}
    return {combinator: [schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}


def value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 2 or roll < 0.5:
        return rng.choice([None, True, False, 0, 1, -3, 7, 11, 2.5, 0.5, -1.5, 10.5, 1.0] + WORDS)
    if roll < 0.75:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {k: value(rng, depth + 1) for k in rng.sample(KEYS + ["z"], rng.randint(0, 3))}


def shaped(s: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value built from the schema's own structure: much more often valid than a random one."""
    if not isinstance(s, dict) or depth > 2:
        return value(rng, 2)
    for key in ("allOf", "anyOf", "oneOf"):
        if key in s:
            return shaped(rng.choice(s[key]), rng, depth)
    if "enum" in s:
        return rng.choice(s["enum"])
    if s.get("type") == "object":
        return {k: shaped(sub, rng, depth + 1) for k, sub in s["properties"].items() if rng.random() < 0.8}
    if s.get("type") == "array":
        prefix = [shaped(p, rng, depth + 1) for p in s.get("prefixItems", [])]
        return prefix + [shaped(s["items"], rng, depth + 1) for _ in range(rng.randint(0, 2))]
    return value(rng, 2)


@pytest.mark.parametrize("seed", range(60))
def test_random_schema_agrees_with_jsonschema(compiler, seed):
    rng = random.Random(seed)
    s = schema(rng)
    try:
        compiled = compiler.compile(GrammarSpec.json_schema(s))
    except GrammarError as err:
        # refusals are allowed only where a complement is not expressible, or the schema accepts nothing
        assert err.code == "unsupported_keyword" and err.message.split("'")[1] in ("oneOf", "not") \
            or "accepts no JSON value" in err.message, err.message
        return
    validator = jsonschema.Draft202012Validator(s)
    orderer = SchemaOrderer(s)
    instances = [value(rng) for _ in range(25)] + [shaped(s, rng) for _ in range(25)]
    for instance in instances:
        expected = validator.is_valid(instance)
        text = orderer.dumps(instance)
        assert walk(compiled, text) == expected, (json.dumps(s), text, expected)
