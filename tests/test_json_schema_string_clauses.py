"""String constraints too large for one regex (a format beside its complement, as `oneOf` of two string
shapes makes): one lazy llguidance lexeme per clause (`A & ~B`), each proven non-empty first (issue 33).

Checked against `jsonschema` with the formats sprig enforces asserted, on valid and invalid strings; what
is still refused names its keyword and pointer.
"""

from __future__ import annotations

import jsonschema
import pytest
from grammar_helpers import format_checker, walk

from sprig.grammar import GrammarError, GrammarSpec
from sprig.grammar.schema import strings
from sprig.grammar.schema.ordering import schema_ordered_dumps
from sprig.grammar.schema.values import SFormat, SLen, s_and, s_not

# why: no "@", "a@" here: jsonschema's email check is only '"@" in s', sprig's is RFC 5321's (a subset), and
# under a negation the two readings differ on exactly those strings
STRINGS = ["", "a", "abcde", "abcdef", "a@b.co", "ab@example.com", "very.long.name@example.com", "x@y",
           "https://example.com/a", "http://x", "2024-01-02", "2024-01-02T10:00:00Z", "2024-13-02", "abc",
           "123e4567-e89b-12d3-a456-426614174000", "123e4567", "1.2.3.4", "b@c", 3, None]


@pytest.mark.parametrize("schema", [
    {"oneOf": [{"type": "string", "format": "email"}, {"type": "string", "maxLength": 5}]},
    {"oneOf": [{"type": "string", "format": "uri"}, {"type": "string", "pattern": "^[a-z]+$"}]},
    {"oneOf": [{"type": "string", "format": "email", "maxLength": 20}, {"type": "string", "pattern": "@"}]},
    {"type": "string", "not": {"format": "email"}, "minLength": 3},
    {"oneOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"},
               {"type": "string", "maxLength": 10}]},
    {"type": "object", "properties": {"contact": {"oneOf": [{"type": "string", "format": "email"},
                                                             {"type": "string", "maxLength": 5}]}}},
])
def test_lazy_clauses_are_exact(compiler, schema):
    compiled = compiler.compile(GrammarSpec.json_schema(schema))
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema, format_checker=format_checker(cls))
    values = STRINGS if "oneOf" in schema or "not" in schema else [{"contact": v} for v in STRINGS]
    verdicts = [validator.is_valid(v) for v in values]
    assert any(verdicts) and not all(verdicts)
    for value, expected in zip(values, verdicts, strict=True):
        text = schema_ordered_dumps(schema, value)
        assert walk(compiled, text) == expected, (schema, text, expected)


def test_an_empty_clause_is_dropped_before_it_reaches_the_lexer():
    # why: email ∧ ¬(email ∨ length ≤ 5) is empty; only the non-empty clause remains
    email, short = SFormat("email"), SLen(0, 5)
    assert strings.lazy_clauses(s_and(email, s_not(email))) == []
    assert len(strings.lazy_clauses(s_and(email, s_not(short)))) == 1


def test_what_stays_too_complex_names_its_keyword_and_pointer(compiler):
    schema = {"properties": {"host": {"oneOf": [{"type": "string", "format": "hostname"},
                                                 {"type": "string", "format": "ipv4"}]}}}
    with pytest.raises(GrammarError) as err:
        compiler.compile(GrammarSpec.json_schema(schema))
    assert err.value.code == "grammar_too_complex" and err.value.pointer == "/properties/host/oneOf"
    assert "'oneOf'" in err.value.message
