"""What several grammar tests share: walking a text through a compiled grammar token by token."""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sprig.grammar import matcher_for


def format_checker(validator_class: Any) -> Any:
    """jsonschema's format checker as sprig asserts formats: the ones it enforces, OpenAPI's integer ranges."""
    import jsonschema

    from sprig.grammar.schema.formats import SUPPORTED_FORMATS
    from sprig.grammar.schema.rewrites import INTEGER_FORMATS

    checker = jsonschema.FormatChecker()
    # why: the plain checker's `time` is draft 3's (no offset); the draft's own checkers win, the rest stay
    checker.checkers = {**checker.checkers, **validator_class.FORMAT_CHECKER.checkers}
    for name in [n for n in checker.checkers if n not in SUPPORTED_FORMATS]:
        del checker.checkers[name]  # why: formats sprig does not enforce are annotations (2020-12)
    for name, (lo, hi) in INTEGER_FORMATS.items():  # why: sprig bounds integers by OpenAPI's formats
        checker.checks(name)(lambda v, lo=lo, hi=hi: not isinstance(v, int) or isinstance(v, bool) or lo <= v <= hi)
    return checker


def walk(compiled, text: str) -> bool:
    """Tokenize `text` as the model would, feed the tokens to a fresh matcher, then require that it may end."""
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


SUITE_ROOT = Path(__file__).parent / "data" / "json-schema-test-suite" / "tests"
DRAFT_URIS = {"draft2020-12": "https://json-schema.org/draft/2020-12/schema",
              "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
              "draft7": "http://json-schema.org/draft-07/schema#",
              "draft6": "http://json-schema.org/draft-06/schema#",
              "draft4": "http://json-schema.org/draft-04/schema#"}


REMOTES_ROOT = SUITE_ROOT.parent / "remotes"


def suite_remotes() -> tuple[tuple[str, str], ...]:
    """The suite's remote documents (what it serves at http://localhost:1234/), as `JsonOptions.documents`."""
    return tuple((f"http://localhost:1234/{p.relative_to(REMOTES_ROOT).as_posix()}", p.read_text())
                 for p in sorted(REMOTES_ROOT.rglob("*.json")))


def suite_files(draft: str) -> list[Path]:
    """The draft's test files, then the optional format files for the formats sprig enforces."""
    from sprig.grammar.schema.formats import SUPPORTED_FORMATS

    root = SUITE_ROOT / draft
    optional = [root / "optional" / "format" / f"{name}.json" for name in sorted(SUPPORTED_FORMATS)]
    return sorted(root.glob("*.json")) + [p for p in optional if p.exists()]


def in_draft(schema: Any, draft: str) -> Any:
    """The schema with the draft's `$schema` where it names none (how a validator learns the draft)."""
    if isinstance(schema, dict) and "$schema" not in schema:
        return {"$schema": DRAFT_URIS[draft], **schema}
    return schema


def expected_valid(file: str, group: dict[str, Any], test: dict[str, Any]) -> bool:
    """The suite's verdict, with format assertion for the formats sprig enforces (its documented setting)."""
    from sprig.grammar.schema.formats import SUPPORTED_FORMATS

    schema = group["schema"]
    if (file == "format.json" and isinstance(schema, dict) and schema.get("format") in SUPPORTED_FORMATS
            and "only an annotation" in test["description"]):
        return False  # format assertion: these strings are not valid dates, emails, ...
    return test["valid"]


def nesting(value: Any) -> int:
    """How deep arrays and objects nest in `value` (0 for a scalar)."""
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


def walk_suite_file(compiler: Any, path: Path, draft: str, options_for: Callable[[dict[str, Any]], Any],
                    refusal_problem: Callable[[Any], str | None],
                    check_model: bool = False) -> tuple[collections.Counter, list[str]]:
    """Compile every schema of one suite file and walk every instance; counts and problems.

    options_for(group) gives the JsonOptions of a test group; refusal_problem(err) says what is wrong
    with a refusal, if anything; check_model also holds the value-set model (`SchemaOrderer.admits`) to
    the suite's verdicts.
    """
    from sprig.grammar import GrammarError, GrammarSpec
    from sprig.grammar.backend import Backend
    from sprig.grammar.schema.ordering import SchemaOrderer
    from sprig.grammar.schema.spellings import Spelling

    name = str(path.relative_to(SUITE_ROOT / draft))
    counts: collections.Counter = collections.Counter()
    problems: list[str] = []
    for group in json.loads(path.read_text()):
        schema = in_draft(group["schema"], draft)
        where = f"{draft}/{name}: {group['description']}"
        options = dataclasses.replace(options_for(group), documents=suite_remotes())
        try:
            compiled = compiler.compile(GrammarSpec.json_schema(schema, options))
        except GrammarError as err:
            if err.code in ("unsupported_keyword", "grammar_too_complex"):
                keyword = err.message.split("'")[1] if err.message.count("'") >= 2 else ""
                counts["refused"] += 1
                counts[f"refused:{keyword or err.code}"] += 1
                problem = refusal_problem(err)
                if problem:
                    problems.append(f"{where}: {problem}: {err.message}")
                continue
            if "accepts no JSON value" not in err.message:
                problems.append(f"{where}: {err.code}: {err.message}")
                continue
            counts["compiled"] += 1  # a schema that accepts nothing: every instance must be invalid
            for test in group["tests"]:
                counts["instances"] += 1
                if expected_valid(name, group, test):
                    counts["false_rejects"] += 1
                    problems.append(f"{where}: {test['description']} (empty grammar)")
            continue
        counts["compiled"] += 1
        orderer = SchemaOrderer(schema, options, Spelling.CANONICAL if compiler.backend is Backend.OUTLINES else None)
        for test in group["tests"]:
            valid = expected_valid(name, group, test)
            counts["instances"] += 1
            accepted = walk(compiled, orderer.dumps(test["data"]))
            if check_model and orderer.admits(test["data"]) != valid:
                problems.append(f"{where}: value-set model disagrees: {test['description']}")
            if accepted and not valid:
                counts["false_accepts"] += 1
                problems.append(f"{where}: FALSE ACCEPT: {test['description']}")
            elif valid and not accepted:
                counts["false_rejects"] += 1
                problems.append(f"{where}: FALSE REJECT: {test['description']}")
    return counts, problems
