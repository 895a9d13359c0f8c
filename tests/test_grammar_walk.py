"""The official JSON-Schema-Test-Suite (draft 2020-12), walked token by token through the outlines backend.

(The default llguidance backend walks both drafts in tests/test_json_schema_suite.py.)

For every schema in the suite: compile it, or have it refused. A refusal must name a keyword outside the
list sprig supports (item 1 of the grammar issue), a `$ref` to another document, or a `format` value
sprig does not support. For every compiled schema, every instance is serialized compactly with object keys
in the order the schema declares them (`schema_ordered_dumps`), tokenized with the tiny checkpoint's
byte-level BPE tokenizer, and walked through the token automaton: a valid instance must be accepted (every
token allowed, then EOS allowed), an invalid one rejected. Separately, the value-set model behind the
grammar (`SchemaOrderer.admits`) must agree with the suite on every instance.

Two documented settings:
  * `format` is enforced (format-assertion semantics). In format.json the suite's "invalid ... string is only
    an annotation by default" instances are therefore expected to be rejected, and the optional
    format-assertion files for the supported formats are walked too.
  * Nesting inside unconstrained values is bounded (a regex cannot match brackets); the bound
    (`any_value_depth`) is raised per schema, up to 4, to the nesting depth of its instances when they go
    deeper than the default.

IDNA A-label host names ("xn--...") are decided beside the automaton (their validity needs Punycode decoding
and the IDNA2008 rules, see grammar/labels.py): the walk goes through `GrammarMatcher.accept_token`, which
applies that check, so they count like every other instance. The test fails on any false accept or reject.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

import pytest
from grammar_helpers import walk

from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, JsonOptions
from sprig.grammar.schema.formats import SUPPORTED_FORMATS
from sprig.grammar.schema.ordering import SchemaOrderer

SUITE = Path(__file__).parent / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"
LISTED_KEYWORDS = {  # item 1 of the issue: refusing one of these is a failure (with the exceptions below)
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
}
MAX_ANY_DEPTH = 4  # the deepest unconstrained value in the suite: [{"foo": {"bar": {"baz": true}}}]


def suite_files() -> list[Path]:
    files = sorted(SUITE.glob("*.json"))
    return files + [SUITE / "optional" / "format" / f"{name}.json" for name in sorted(SUPPORTED_FORMATS)]


def nesting(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


def expected_valid(file: str, group: dict[str, Any], test: dict[str, Any]) -> bool:
    schema = group["schema"]
    if (file == "format.json" and isinstance(schema, dict) and schema.get("format") in SUPPORTED_FORMATS
            and "only an annotation" in test["description"]):
        return False  # format assertion: these strings are not valid dates, emails, ...
    return test["valid"]


def acceptable_refusal(err: GrammarError) -> bool:
    keyword = err.message.split("'")[1]
    named = [k for k in re.findall(r"'([^']+)'", err.message) if not k.startswith("/")]
    if keyword not in LISTED_KEYWORDS or any(k not in LISTED_KEYWORDS for k in named):
        return True  # why: forced by a keyword outside the list (e.g. a oneOf overlap in patternProperties)
    return (keyword == "$ref" and "outside the schema" in err.message) or (
        keyword == "format" and "format '" in err.message)


def run_file(compiler: GrammarCompiler, path: Path) -> tuple[collections.Counter, list[str]]:
    name = str(path.relative_to(SUITE))
    counts: collections.Counter = collections.Counter()
    problems: list[str] = []
    for group in json.loads(path.read_text()):
        schema = group["schema"]
        needed = max([nesting(t["data"]) for t in group["tests"] if t["valid"]], default=0)
        depth = max(JsonOptions().any_value_depth, min(needed, MAX_ANY_DEPTH))
        options = JsonOptions(any_value_depth=depth)
        try:
            compiled = compiler.compile(GrammarSpec.json_schema(schema, options))
        except GrammarError as err:
            if err.code == "unsupported_keyword":
                counts["refused"] += 1
                counts["refused:" + err.message.split("'")[1]] += 1
                if not acceptable_refusal(err):
                    problems.append(f"{name}: refused a listed keyword: {err.message}")
                continue
            if "accepts no JSON value" not in err.message:
                problems.append(f"{name}: {group['description']}: {err.code}: {err.message}")
                continue
            counts["compiled"] += 1  # a schema that accepts nothing: every instance must be invalid
            for test in group["tests"]:
                counts["instances"] += 1
                if expected_valid(name, group, test):
                    counts["false_rejects"] += 1
                    problems.append(f"{name}: {group['description']}: {test['description']} (empty grammar)")
            continue
        counts["compiled"] += 1
        orderer = SchemaOrderer(schema, options)
        for test in group["tests"]:
            valid = expected_valid(name, group, test)
            counts["instances"] += 1
            accepted = walk(compiled, orderer.dumps(test["data"]))
            if orderer.admits(test["data"]) != valid:
                problems.append(f"{name}: value-set model disagrees: {group['description']}: {test['description']}")
            if accepted and not valid:
                counts["false_accepts"] += 1
                problems.append(f"{name}: FALSE ACCEPT: {group['description']}: {test['description']}")
            elif valid and not accepted:
                counts["false_rejects"] += 1
                problems.append(f"{name}: FALSE REJECT: {group['description']}: {test['description']}")
    return counts, problems


@pytest.fixture(scope="module")
def outlines_compiler(info):
    with GrammarCompiler(info, max_workers=1, isolate=False, backend="outlines") as comp:
        yield comp


def test_walk_json_schema_test_suite(outlines_compiler: GrammarCompiler) -> None:
    compiler = outlines_compiler
    rows, problems = [], []
    for path in suite_files():
        counts, found = run_file(compiler, path)
        rows.append((str(path.relative_to(SUITE)), counts))
        problems += found
    print_table(rows)
    assert not problems, "\n".join(problems[:50])
    total = sum((c for _, c in rows), collections.Counter())
    assert total["false_accepts"] == total["false_rejects"] == 0
    assert total["compiled"] >= 200 and total["instances"] >= 1000


def print_table(rows: list[tuple[str, collections.Counter]]) -> None:
    header = f"{'file':36} {'compiled':>8} {'refused':>7} {'instances':>9} {'false acc':>9} {'false rej':>9}  refused for"
    print("\n" + header + "\n" + "-" * len(header))
    total: collections.Counter = collections.Counter()
    for name, c in rows:
        total.update(c)
        why = ", ".join(f"{k[8:]}x{v}" for k, v in sorted(c.items()) if k.startswith("refused:"))
        print(f"{name:36} {c['compiled']:8} {c['refused']:7} {c['instances']:9} {c['false_accepts']:9} "
              f"{c['false_rejects']:9}  {why}")
    print("-" * len(header))
    print(f"{'total':36} {total['compiled']:8} {total['refused']:7} {total['instances']:9} "
          f"{total['false_accepts']:9} {total['false_rejects']:9}")
