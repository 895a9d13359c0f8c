"""Constrained generation end to end: the random-weight tiny model, masked by compiled grammars, through the Engine.

The model writes nonsense; the grammar alone makes it valid. Over 60+ schemas (official-suite schemas that
compile, plus realistic API schemas written here) and regexes and choices, at temperature 1.0 and greedy,
in two batched `Engine.generate` calls: every output that finishes on its own (EOS) must parse and validate
with the `jsonschema` library (the formats sprig enforces are checked; others are annotations, 2020-12's
default); a regex output must full-match its regex; a choice output must be one of the choices. Recursion
is unbounded in the grammar, so a random model may nest a recursive schema until `max_new_tokens`: at
most 2 % of the outputs may end that way.

The random model spreads its probability over ~2,000 tokens, and only 1-5 of them can close a string
('"', '",', ...), an email's local part ('@') or a URI's scheme (':'): left alone it writes ~1,000 tokens
of free text before closing one, past the tiny model's 2,048-token context (and greedy decoding may never close one). Both runs
therefore add a logit bias of CLOSING_BIAS to the tokens containing '"', '@' or ':' -- a sampling parameter,
applied before the grammar's mask, that changes no grammar. No grammar can force those strings to end
without bounding their length, which would change the schema's language. Numbers are bounded in the grammar
(grammar/schema/numbers.py: freely chosen digits are counted), so digits never run on.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import idna
import jsonschema
import pytest

from sprig import Engine
from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, JsonOptions, TokenizerInfo
from sprig.grammar.schema.formats import SUPPORTED_FORMATS

SUITE = Path(__file__).parent / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"
SUITE_FILES = ["type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
               "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "ref", "defs", "minLength", "maxLength",
               "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "not",
               "if-then-else", "boolean_schema", "default"]
PER_FILE = 3  # schemas taken from each suite file (the first ones that compile)
MAX_NEW_TOKENS = 2000  # the tiny model's context is 2048
CLOSING_BIAS = 3.0
CLOSERS = (b'"', b"@", b":")  # the end of a string, of an email's local part, of a URI's scheme

ADDRESS = {"type": "object", "properties": {
    "street": {"type": "string", "maxLength": 40}, "city": {"type": "string", "maxLength": 30},
    "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
    "country": {"enum": ["US", "CA", "GB", "DE", "FR", "JP"]}},
    "required": ["street", "city", "country"], "additionalProperties": False}
MONEY = {"type": "object", "properties": {"amount": {"type": "number", "minimum": 0, "maximum": 1000000},
                                          "currency": {"enum": ["USD", "EUR", "GBP", "JPY"]}},
         "required": ["amount", "currency"], "additionalProperties": False}
API_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 130},
                                      "email": {"type": "string", "format": "email"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}, "address": ADDRESS}, "required": ["id", "address"],
        "additionalProperties": False}}, "required": ["user"], "additionalProperties": False},
    {"type": "object", "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
        "created_at": {"type": "string", "format": "date-time"},
        "status": {"enum": ["pending", "paid", "shipped", "delivered", "cancelled"]},
        "items": {"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "object", "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
            "qty": {"type": "integer", "minimum": 1, "maximum": 99}, "price": MONEY},
            "required": ["sku", "qty", "price"], "additionalProperties": False}},
        "note": {"type": "string", "maxLength": 60}},
     "required": ["order_id", "created_at", "status", "items"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object", "properties": {
        "label": {"type": "string", "maxLength": 12},
        "children": {"type": "array", "maxItems": 3, "items": {"$ref": "#/$defs/node"}}},
        "required": ["label"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"tool": {"const": "get_weather"}, "arguments": {
        "type": "object", "properties": {"location": {"type": "string", "maxLength": 40},
                                         "unit": {"enum": ["celsius", "fahrenheit"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["location"], "additionalProperties": False}}, "required": ["tool", "arguments"],
     "additionalProperties": False},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"},
                                                 "r": {"type": "number", "exclusiveMinimum": 0, "maximum": 100}},
                "required": ["kind", "r"], "additionalProperties": False},
               {"type": "object", "properties": {"kind": {"const": "rect"},
                                                 "w": {"type": "number", "minimum": 0, "maximum": 100},
                                                 "h": {"type": "number", "minimum": 0, "maximum": 100}},
                "required": ["kind", "w", "h"], "additionalProperties": False}]},
    {"type": "array", "minItems": 2, "maxItems": 5, "items": {"type": "object", "properties": {
        "ts": {"type": "string", "format": "date"}, "temp_c": {"type": "number", "minimum": -90, "maximum": 60}},
        "required": ["ts", "temp_c"], "additionalProperties": False}},
    {"type": "object", "properties": {"host": {"type": "string", "format": "hostname"},
                                      "ipv4": {"type": "string", "format": "ipv4"},
                                      "ipv6": {"type": "string", "format": "ipv6"},
                                      "port": {"type": "integer", "minimum": 1, "maximum": 65535}},
     "required": ["host", "port"], "additionalProperties": False},
    {"type": "object", "properties": {"homepage": {"type": "string", "format": "uri"},
                                      "opens": {"type": "string", "format": "time"}},
     "required": ["homepage"], "additionalProperties": False},
    {"type": "object", "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]},
                                      "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["sentiment", "confidence"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                                               "maxItems": 3},
                                      "score": {"type": "integer", "exclusiveMinimum": -10,
                                                "exclusiveMaximum": 10}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}, "active": {"type": "boolean"},
                                      "deleted_at": {"type": ["string", "null"], "format": "date-time"}},
     "required": ["id", "active", "deleted_at"], "additionalProperties": False},
    {"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 20},
                                      "filters": {"type": "object", "properties": {"year": {"type": "integer"}},
                                                  "additionalProperties": {"type": "integer"}}},
     "required": ["query"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "array", "prefixItems": [
        {"type": "number", "minimum": -180, "maximum": 180}, {"type": "number", "minimum": -90, "maximum": 90}],
        "items": False, "minItems": 2}}, "required": ["point"], "additionalProperties": False},
    {"type": "object", "properties": {"price": MONEY, "discount": {"anyOf": [
        {"type": "number", "minimum": 0, "maximum": 100}, {"type": "null"}]}},
     "required": ["price"], "additionalProperties": False},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}},
     "required": ["name"]},  # JSON Schema's default: other properties allowed
    {"type": "object", "properties": {"event": {"enum": ["click", "view", "purchase"]},
                                      "at": {"type": "string", "format": "date-time"},
                                      "props": {"type": "object", "properties": {
                                          "page": {"type": "string", "pattern": "^/[a-z/]{0,20}$"},
                                          "ms": {"type": "integer", "minimum": 0, "maximum": 60000}},
                                          "additionalProperties": False}},
     "required": ["event", "at"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 10, "maximum": 999},
                                      "b": {"type": "number", "minimum": 0.5, "maximum": 2.5},
                                      "c": {"type": "integer", "minimum": -50, "maximum": -20}},
     "required": ["a", "b", "c"], "additionalProperties": False},
    {"$defs": {"expr": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {
        "type": "object", "properties": {"op": {"enum": ["+", "*"]}, "args": {
            "type": "array", "minItems": 2, "maxItems": 2, "items": {"$ref": "#/$defs/expr"}}},
        "required": ["op", "args"], "additionalProperties": False}]}}, "$ref": "#/$defs/expr"},
    {"type": "object", "properties": {"contact": {"type": "object", "properties": {
        "email": {"type": "string", "format": "email"}, "phone": {"type": "string", "pattern": "^\\+[0-9]{7,12}$"}},
        "additionalProperties": False}, "address": ADDRESS, "birthday": {"type": "string", "format": "date"}},
     "required": ["contact"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"const": True}, "data": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"k": {"type": "string", "maxLength": 8}, "v": {"type": "integer"}},
        "required": ["k", "v"], "additionalProperties": False}}}, "required": ["ok", "data"],
     "additionalProperties": False},
    {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40},
                                      "priority": {"enum": [1, 2, 3]},
                                      "assignee": {"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]},
                                      "labels": {"type": "array", "items": {"type": "string", "maxLength": 10},
                                                 "maxItems": 3}},
     "required": ["title", "priority"], "additionalProperties": False},
]
REGEXES = [r"[A-Z]{2}-[0-9]{3,5}", r"(yes|no|maybe)( because [a-z ]{1,20})?", r"\d{4}-\d{2}-\d{2}",
           r"[a-z]{1,10}@[a-z]{1,10}\.(com|org)", r"(0|[1-9][0-9]{0,5})(\.[0-9]{1,3})?"]
CHOICES = [["red", "green", "blue"], ["Paris", "Tokyo", "New York", "São Paulo"], ["true", "false"]]


# draft 2020-12's checkers (hostname needs fqdn, uri rfc3986-validator), copied to extend hostname
FORMATS = copy.deepcopy(jsonschema.Draft202012Validator.FORMAT_CHECKER)
_FQDN_HOSTNAME = FORMATS.checkers["hostname"][0] if "hostname" in FORMATS.checkers else None


@FORMATS.checks("hostname")
def hostname(value: object) -> bool:
    """jsonschema's RFC 1123 check, plus what it leaves out: every "xn--" label a valid IDNA A-label."""
    if not isinstance(value, str):
        return True
    for label in value.split("."):
        if label[:4].lower() == "xn--":
            try:
                if idna.encode(idna.decode(label)).decode() != label.lower():
                    return False
            except (idna.IDNAError, UnicodeError):
                return False
    return _FQDN_HOSTNAME is not None and bool(_FQDN_HOSTNAME(value))


for _name in [n for n in FORMATS.checkers if n not in SUPPORTED_FORMATS]:
    del FORMATS.checkers[_name]  # why: sprig treats formats it does not enforce as annotations (2020-12)


def suite_schemas(compiler: GrammarCompiler) -> list[Any]:
    """The first PER_FILE schemas of each listed suite file that compile and accept some value."""
    out: list[Any] = []
    for name in SUITE_FILES:
        taken = 0
        for group in json.loads((SUITE / f"{name}.json").read_text()):
            if taken == PER_FILE:
                break
            if not any(t["valid"] for t in group["tests"]) or not oracle_handles(group):
                continue
            try:
                compiler.compile(GrammarSpec.json_schema(group["schema"], JsonOptions()))
            except GrammarError:
                continue
            out.append(group["schema"])
            taken += 1
    return out


def oracle_handles(group: dict[str, Any]) -> bool:
    """False where `jsonschema` itself cannot check the schema (ECMA-262 pattern syntax Python lacks)."""
    try:
        for test in group["tests"]:
            jsonschema.Draft202012Validator(group["schema"]).is_valid(test["data"])
    except re.error:
        return False
    return True


@pytest.fixture(scope="module")
def engine(tiny_paths):
    with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", max_total_tokens=1 << 17, random_seed=0,
                max_running_requests=256) as e:
        yield e


@pytest.fixture(scope="module")
def schemas(tiny_paths) -> list[Any]:
    info = TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[2], vocab_size=2100)
    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        return suite_schemas(comp) + API_SCHEMAS


def closing_bias() -> dict[str, float]:
    """CLOSING_BIAS on the tiny tokenizer's tokens that contain one of CLOSERS."""
    from sprig.runtime.model.checkpoints import checkpoint_path

    info = TokenizerInfo.from_tokenizer(checkpoint_path("tiny-llama"), eos_token_ids=[2], vocab_size=2100)
    return {str(i): CLOSING_BIAS for i, raw in enumerate(info.token_bytes) if raw and any(c in raw for c in CLOSERS)}


def requests(schemas: list[Any], temperature: float) -> list[tuple[str, dict[str, Any], Any]]:
    """(prompt, sampling params, what to check) for every schema, regex and choice list."""
    reps = 3 if temperature > 0 else 1  # why: greedy repeats itself; sampled runs differ by seed
    extra = {"logit_bias": closing_bias()}  # why: see the module note
    out = []
    for i, schema in enumerate(schemas):
        for k in range(reps):
            params = {"json_schema": json.dumps(schema), "temperature": temperature, "seed": 1000 * i + k,
                      "max_new_tokens": MAX_NEW_TOKENS, **extra}
            out.append((f"Schema {i}, answer {k} in JSON:", params, ("json", schema)))
    for i, pattern in enumerate(REGEXES):
        for k in range(reps):
            params = {"regex": pattern, "temperature": temperature, "seed": 7 + k, "max_new_tokens": 200, **extra}
            out.append((f"Pattern {i} {k}:", params, ("regex", pattern)))
    for i, options in enumerate(CHOICES):
        for k in range(reps):
            params = {"choices": options, "temperature": temperature, "seed": 3 + k, "max_new_tokens": 50, **extra}
            out.append((f"Pick {i} {k}:", params, ("choices", options)))
    return out


def check(text: str, what: tuple[str, Any]) -> str | None:
    """None if `text` satisfies the constraint, else why not."""
    kind, spec = what
    if kind == "regex":
        return None if re.fullmatch(spec, text) else f"does not match {spec!r}"
    if kind == "choices":
        return None if text in spec else f"not one of {spec}"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not JSON: {exc}"
    validator = jsonschema.Draft202012Validator(spec, format_checker=FORMATS)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return None if error is None else f"invalid: {error.message[:200]}"


@pytest.mark.parametrize("temperature", [1.0, 0.0], ids=["sampled", "greedy"])
def test_constrained_generations_are_valid(engine, schemas, temperature):
    assert len(schemas) >= 60 and len(API_SCHEMAS) >= 20
    assert _FQDN_HOSTNAME is not None and {"uri", "email", "date-time", "ipv6", "uuid"} <= set(FORMATS.checkers), \
        "install the test's format checkers: pip install -e '.[dev]' (fqdn, rfc3986-validator)"
    reqs = requests(schemas, temperature)
    outs = engine.generate([p for p, _, _ in reqs], [s for _, s, _ in reqs])
    problems, unfinished = [], []
    for (_, _, what), out in zip(reqs, outs, strict=True):
        finish = out["meta_info"]["finish_reason"]["type"]
        if finish != "stop":  # why: a recursive schema lets a random model nest until max_new_tokens
            unfinished.append(f"{what[0]} {json.dumps(what[1])[:120]}: finished by {finish}")
            continue
        why = check(out["text"], what)
        if why is not None:
            problems.append(f"{what[0]} {json.dumps(what[1])[:120]}: {why}: {out['text'][:200]!r}")
    print(f"\n{temperature=}: {len(reqs)} generations over {len(schemas)} schemas, "
          f"{len(REGEXES)} regexes, {len(CHOICES)} choice lists: {len(reqs) - len(problems) - len(unfinished)} "
          f"valid, {len(unfinished)} unfinished")
    assert not problems, "\n".join(problems[:20])
    assert len(unfinished) <= len(reqs) // 50, "\n".join(unfinished[:20])
