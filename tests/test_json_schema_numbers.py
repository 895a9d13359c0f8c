"""Numbers as JSON Schema defines them (issue 33): any spelling of an admitted value is accepted.

A random-value oracle: hypothesis draws a schema (type number or integer, random minimum / maximum /
exclusive bounds and an integer `multipleOf`) and values, spells each value many ways (`2`, `2.0`,
`2.000`, `2e0`, `0.2E+1`, `20e-1`, `-0`, ...) within the documented digit limits (schema/spellings.py) and
walks every spelling token by token; the walk must accept exactly when `jsonschema` (draft 2020-12) says
the value is valid. Under draft 4 (`2.0` is no integer there) the grammar keeps to decimal notation and
integer literals: never a false accept, and every canonical spelling decided exactly.
"""

from __future__ import annotations

import json
import os
import random
import re
from decimal import Decimal

import jsonschema
from grammar_helpers import walk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sprig.grammar import GrammarError, GrammarSpec
from sprig.grammar.regex import ir
from sprig.grammar.schema.numbers import NumSet
from sprig.grammar.schema.spellings import MAX_TRAILING_ZEROS, Spelling, number_spellings

DRAFT4 = "http://json-schema.org/draft-04/schema#"
SETTINGS = settings(max_examples=int(os.environ.get("SPRIG_ORACLE_EXAMPLES", "40")), deadline=None,
                    derandomize="SPRIG_ORACLE_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def decimals(max_places: int) -> st.SearchStrategy[Decimal]:
    magnitudes = st.sampled_from([100, 20_000, 3 * 10**7])  # why: bounds and values far from 1 reach the exponents
    return st.builds(lambda n, k: Decimal(n).scaleb(-k), magnitudes.flatmap(lambda m: st.integers(-m, m)),
                     st.integers(0, max_places))


@st.composite
def number_schemas(draw) -> dict:
    schema: dict = {"type": draw(st.sampled_from(["number", "integer"]))}
    for key in draw(st.sets(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]))):
        bound = draw(decimals(2))
        schema[key] = int(bound) if bound == bound.to_integral_value() else float(bound)
    if draw(st.booleans()) and draw(st.booleans()):
        schema["multipleOf"] = draw(st.integers(1, 12))
    return schema


def spellings(value: Decimal, draw, exponents: range = range(-9, 10)) -> list[str]:
    """Several JSON spellings of `value` (at most 6 fraction digits), all inside the grammar's digit limits,
    with exponents from `exponents`."""
    plain = format(value.normalize(), "f") if value else "0"
    out = [plain]
    if "." in plain:
        out.append(plain + "0" * draw(st.integers(1, 3)))
    else:
        out.append(plain + "." + "0" * draw(st.integers(1, 3)))
    if value == 0:
        out += ["-0", "-0.0", "0e5", "-0E-2"]
    for x in draw(st.lists(st.sampled_from(exponents), min_size=1, max_size=3, unique=True)):
        mantissa = format(value.scaleb(-x).normalize(), "f")
        whole, _, frac = mantissa.lstrip("-").partition(".")
        if len(frac) > 6 or len(whole) > 6:
            continue  # why: beyond the free-digit limits the grammar documents
        sign = draw(st.sampled_from(["", "+"] if x >= 0 else ["-"]))
        digits = str(abs(x)).rjust(draw(st.integers(1, 2)), "0")
        out.append(f"{mantissa}{draw(st.sampled_from('eE'))}{sign}{digits}")
    return out


def valid(schema: dict, text: str) -> bool:
    return jsonschema.validators.validator_for(schema)(schema).is_valid(json.loads(text))


@given(data=st.data())
@SETTINGS
def test_every_spelling_of_a_value_is_decided_by_its_value(compiler, data):
    schema = data.draw(number_schemas())
    try:
        compiled = compiler.compile(GrammarSpec.json_schema(schema))
    except GrammarError as err:
        assert "accepts no JSON value" in err.message, (schema, err.message)  # empty bounds, nothing else
        return
    for value in data.draw(st.lists(decimals(3), min_size=4, max_size=6)):
        for text in spellings(value, data.draw, range(0, 1) if "multipleOf" in schema else range(-9, 10)):
            assert walk(compiled, text) == valid(schema, text), (schema, text)


@given(data=st.data())
@SETTINGS
def test_draft4_integers_stay_literals_and_nothing_invalid_is_accepted(compiler, data):
    schema = {"$schema": DRAFT4, **data.draw(number_schemas())}
    for key in ("exclusiveMinimum", "exclusiveMaximum"):  # draft 4 spells them as booleans beside the bound
        if key in schema:
            bound = schema.pop(key)
            schema["minimum" if key == "exclusiveMinimum" else "maximum"] = bound
            schema[key] = True
    try:
        compiled = compiler.compile(GrammarSpec.json_schema(schema))
    except GrammarError as err:
        assert "accepts no JSON value" in err.message, (schema, err.message)
        return
    for value in data.draw(st.lists(decimals(3), min_size=4, max_size=6)):
        texts = spellings(value, data.draw)
        for text in texts:
            accepted = walk(compiled, text)
            assert not accepted or valid(schema, text), ("false accept", schema, text)
        canonical = texts[0]
        assert walk(compiled, canonical) == valid(schema, canonical), (schema, canonical)


def test_the_reported_bounded_numbers(compiler):
    """Issue 33's false rejects: 2048.0 and 1e3 under minimum 512.0, 2.0 under minimum 1."""
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "number", "minimum": 512.0}))
    assert all(walk(compiled, t) for t in ("2048.0", "1e3", "2048", "5.12e2", "512.000", "1E+05"))
    assert not any(walk(compiled, t) for t in ("511.9", "5.11e2", "-1e3", "51100e-2"))
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "number", "minimum": 0, "maximum": 1000000}))
    assert walk(compiled, "1e6") and walk(compiled, "999999.5e0") and walk(compiled, "5.0e-3")
    assert not walk(compiled, "51297100e000") and not walk(compiled, "1000001e0")  # zeros after an integer count
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "number", "minimum": 1}))
    assert walk(compiled, "2.0") and walk(compiled, "1.0e0") and not walk(compiled, "0.5")
    compiled = compiler.compile(GrammarSpec.json_schema({"type": "integer", "multipleOf": 5}))
    assert all(walk(compiled, t) for t in ("10.0", "-0", "0", "-15")) and not walk(compiled, "11")


def _random_spelling(rng: random.Random) -> str:
    """Any JSON number text: sign, integer digits, fraction, exponent with sign and leading zeros."""
    text = "-" if rng.random() < 0.3 else ""
    text += "0" if rng.random() < 0.2 else str(rng.randint(1, 9)) + "".join(rng.choices("0123456789", k=rng.randint(0, 9)))
    if text[-1] != "0" and rng.random() < 0.3:  # why: trailing zeros before a point multiply the value
        text += "0" * rng.randint(1, 4)
    if rng.random() < 0.5:
        text += "." + "".join(rng.choices("0123456789", k=rng.randint(1, 8))) + "0" * rng.choice([0, 0, 2, 16])
    if rng.random() < 0.6:
        text += rng.choice("eE") + rng.choice(["", "+", "-"]) + "0" * rng.randint(0, 2) + str(rng.randint(0, 40))
    return text


def _within_limits(text: str) -> bool:
    """The digit limits schema/spellings.py documents: 15 trailing zeros, mantissa 6 + 6, exponent 2 digits."""
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, frac = mantissa.lstrip("-").partition(".")
    digits = frac.rstrip("0")
    if len(frac) - len(digits) > MAX_TRAILING_ZEROS:
        return False
    if exponent:
        bare = exponent.lstrip("+-")
        significant = bare.lstrip("0") or "0"
        return len(significant) <= 2 and len(bare) - len(significant) <= 2 and len(whole) <= 6 and len(digits) <= 6
    return len(digits) <= 6 and len(whole) <= (9 if digits else 15)


def test_the_spelling_regex_is_exact_on_arbitrary_number_texts():
    """Regex level, no tokenizer: random bounds (up to 1e9, 0-4 decimals), random number texts; a text
    matches only if its value is in the set, and every text within the documented limits whose value is."""
    rng = random.Random(33)
    for _ in range(60):
        ints, fracs = NumSet.everything(True), NumSet.everything(False)
        for make in (NumSet.at_least, NumSet.at_most):
            if rng.random() < 0.8:
                bound = Decimal(rng.randint(-10 ** rng.randint(0, 9), 10 ** rng.randint(0, 9))).scaleb(-rng.randint(0, 4))
                inclusive = rng.random() < 0.5
                ints, fracs = ints.intersect(make(bound, inclusive, True)), fracs.intersect(make(bound, inclusive, False))
        if rng.random() < 0.5:
            fracs = NumSet.nothing(False)  # type: integer
        if rng.random() < 0.3:  # an enum: single values, among them texts' values below
            values = [Decimal(_random_spelling(rng)).normalize() for _ in range(20)]
            ints = NumSet.points([v for v in values if v == v.to_integral_value()], True)
            fracs = NumSet.points([v for v in values if v != v.to_integral_value()], False)
        regex = re.compile(number_spellings(ints, fracs, Spelling.ANY).render(ir.Flavor.PYTHON))
        for i in range(200):
            text = _random_spelling(rng)
            if i % 4 == 0 and (ints.intervals or fracs.intervals):  # why: respell a member, so members get tested
                member_iv = rng.choice(ints.intervals + fracs.intervals)
                if member_iv.lo is not None and member_iv.lo == member_iv.hi and member_iv.lo != 0:
                    x = rng.randint(-3, 3)
                    zeros = "0" * rng.choice([0, 0, 1, 2])  # why: after a point they keep the value, else they do not
                    text = format(member_iv.lo.scaleb(-x).normalize(), "f") + zeros + f"e{x}"
            value = Decimal(text)
            member = ints.contains(value) if value == value.to_integral_value() else fracs.contains(value)
            matched = regex.fullmatch(text) is not None
            assert member or not matched, ("false accept", text, ints, fracs)
            assert matched or not member or not _within_limits(text), ("false reject", text, ints, fracs)
