"""Real-world-shaped schemas (tests/data/real_world/corpus.json, written for sprig) on the default backend.

Each schema is of a kind issue 15 found refused or mishandled: function-calling parameters, OpenAPI
components with draft-4 `id` and `x-*`, Kubernetes-style objects with `x-kubernetes-*`, GeoJSON, package.json
and tsconfig-like configuration (`dependencies`, unknown formats), vendor keywords (`self`, `links`,
`esriDocumentation`), recursive trees, unconstrained payloads, `patternProperties`, `propertyNames`,
min/maxProperties, `uniqueItems` over an enum, integer `multipleOf`, format with `maxLength`, `contains`,
`unevaluatedProperties`. `jsonschema` first confirms every instance's label (with the formats sprig
enforces asserted, OpenAPI's integer formats included); then every schema must
compile, and every instance walked token by token must be accepted exactly when it is valid.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from grammar_helpers import walk

from sprig.grammar import GrammarSpec
from sprig.grammar.formats import SUPPORTED_FORMATS
from sprig.grammar.ordering import SchemaOrderer
from sprig.grammar.schema_deps import INTEGER_FORMATS

CORPUS = json.loads((Path(__file__).parent / "data" / "real_world" / "corpus.json").read_text())


def format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker()
    for name in [n for n in checker.checkers if n not in SUPPORTED_FORMATS]:
        del checker.checkers[name]  # why: formats sprig does not enforce are annotations (2020-12)
    for name, (lo, hi) in INTEGER_FORMATS.items():  # why: sprig bounds integers by OpenAPI's formats
        checker.checks(name)(lambda v, lo=lo, hi=hi: not isinstance(v, int) or isinstance(v, bool) or lo <= v <= hi)
    return checker


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_corpus_labels_agree_with_jsonschema(entry):
    validator = jsonschema.validators.validator_for(entry["schema"])(entry["schema"], format_checker=format_checker())
    assert all(validator.is_valid(v) for v in entry["valid"])
    assert not any(validator.is_valid(v) for v in entry["invalid"])


def test_corpus_compiles_and_walks_exactly(compiler):
    compiled_n, problems, instances = 0, [], 0
    for entry in CORPUS:
        compiled = compiler.compile(GrammarSpec.json_schema(entry["schema"]))  # a refusal fails the test
        compiled_n += 1
        orderer = SchemaOrderer(entry["schema"])
        for value, valid in [(v, True) for v in entry["valid"]] + [(v, False) for v in entry["invalid"]]:
            instances += 1
            if walk(compiled, orderer.dumps(value)) != valid:
                problems.append(f"{entry['name']}: {'false reject' if valid else 'false accept'}: {value}")
    print(f"\ncorpus: {compiled_n} of {len(CORPUS)} schemas compiled, {instances} instances, "
          f"{len(problems)} false accepts/rejects")
    assert not problems, "\n".join(problems)
