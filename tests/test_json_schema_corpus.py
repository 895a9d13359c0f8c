"""Real-world-shaped schemas (tests/data/real_world/corpus.json, written for sprig) on the default backend.

Each schema is of a kind issue 15 found refused or mishandled: function-calling parameters of many APIs,
OpenAPI components (Petstore-, GitHub- and Stripe-like) with draft-4 `id`, `x-*` and `example`,
Kubernetes-style objects with `x-kubernetes-*`, GeoJSON, package.json / tsconfig / eslint / compose /
workflow-like configuration (`dependencies`, unknown formats), Snowplow-like events and other vendor
keywords (`self`, `links`, `esriDocumentation`, `_format`, `_uniqueItems`, `version`, `readonly`, `name`),
recursive trees, unconstrained payloads nested deep, `patternProperties`, `propertyNames`,
min/maxProperties, `uniqueItems`, integer `multipleOf`, `not`, overlapping `oneOf`, bounded arrays of
objects and long enums. `jsonschema` first confirms every instance's label (with the formats sprig
enforces asserted, OpenAPI's integer formats included). Then, as issue 33 accepts: at least 98 % of the
schemas compile, every refusal is an `unsupported_keyword` / `grammar_too_complex` error naming its
keyword, and every instance of a compiled schema, walked token by token, is accepted exactly when it is
valid. An entry with `known_issue` (a sprig bug, kept in the corpus) is reported and skipped.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import jsonschema
import pytest
from grammar_helpers import format_checker, walk

from sprig.grammar import GrammarError, GrammarSpec
from sprig.grammar.schema.ordering import SchemaOrderer

CORPUS = json.loads((Path(__file__).parent / "data" / "real_world" / "corpus.json").read_text())
MAX_REFUSED = 0.02  # issue 33: at least 98 % of the corpus compiles


def test_corpus_size_and_shape():
    assert len(CORPUS) >= 300  # issue 33
    assert len({e["name"] for e in CORPUS}) == len(CORPUS), "names are unique (they are test ids)"
    for entry in CORPUS:
        assert 2 <= len(entry["valid"]) <= 4 and 2 <= len(entry["invalid"]) <= 4, entry["name"]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_corpus_labels_agree_with_jsonschema(entry):
    cls = jsonschema.validators.validator_for(entry["schema"])
    validator = cls(entry["schema"], format_checker=format_checker(cls))
    assert [v for v in entry["valid"] if not validator.is_valid(v)] == [], "labelled valid, jsonschema rejects"
    assert [v for v in entry["invalid"] if validator.is_valid(v)] == [], "labelled invalid, jsonschema accepts"


def test_corpus_compiles_and_walks_exactly(compiler):
    counts: collections.Counter = collections.Counter()
    refused, problems, known = [], [], []
    for entry in CORPUS:
        if entry.get("known_issue"):
            known.append(f"{entry['name']}: {entry['known_issue']}")
            continue
        try:
            compiled = compiler.compile(GrammarSpec.json_schema(entry["schema"]))
        except GrammarError as err:
            keyword = err.message.split("'")[1] if err.message.count("'") >= 2 else ""
            refused.append(f"{entry['name']}: {keyword} at {err.pointer} ({err.message})")
            if err.code not in ("unsupported_keyword", "grammar_too_complex") or not keyword:
                problems.append(f"{entry['name']}: a refusal that names no keyword: {err.code}: {err.message}")
            continue
        counts["compiled"] += 1
        orderer = SchemaOrderer(entry["schema"])
        for value, valid in [(v, True) for v in entry["valid"]] + [(v, False) for v in entry["invalid"]]:
            counts["instances"] += 1
            if walk(compiled, orderer.dumps(value)) != valid:
                counts["false rejects" if valid else "false accepts"] += 1
                problems.append(f"{entry['name']}: {'false reject' if valid else 'false accept'}: {orderer.dumps(value)}")
    print(f"\ncorpus: {len(CORPUS)} schemas, {counts['compiled']} compiled, {len(refused)} refused "
          f"({len(refused) / len(CORPUS):.1%}), {len(known)} skipped as known issues; {counts['instances']} instances "
          f"walked, {counts['false accepts']} false accepts, {counts['false rejects']} false rejects")
    for line in refused:
        print("  refused:", line)
    for line in known:
        print("  known issue:", line)
    assert not problems, "\n".join(problems)
    assert len(refused) + len(known) <= MAX_REFUSED * len(CORPUS), "more than 2 % of the corpus is refused"
