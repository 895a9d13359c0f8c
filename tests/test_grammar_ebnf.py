"""`GrammarSpec.ebnf`: GBNF / xgrammar-style EBNF and Lark grammars, checked by independent parsers.

Four grammars (arithmetic, JSON written as a grammar, a SQL SELECT subset, a tool-call format) are written
in GBNF; each has a reference written separately for the `lark` library (Earley, dynamic lexer) or, for
JSON, Python's `json` module. Random walks through the matcher (uniform over the allowed tokens, with a
bias toward closing characters and EOS so they end) must produce only strings the reference accepts;
known strings are walked token by token both ways. Malformed grammars give `invalid_grammar` with the
line and column.
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, matcher_for
from sprig.grammar.matcher import allocate_token_bitmask

lark = pytest.importorskip("lark")  # the independent parser (dev dependency)

ARITHMETIC = r"""
# integer and decimal arithmetic with parentheses and unary minus
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
"""
ARITHMETIC_LARK = r"""
start: expr
expr: term (/[+-]/ term)*
term: factor (/[*\/]/ factor)*
factor: NUMBER | "(" expr ")" | "-" factor
NUMBER: /[0-9]+(\.[0-9]+)?/
"""

JSON_GBNF = r"""
root    ::= value
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ( member ( "," member )* )? "}"
member  ::= string ":" value
array   ::= "[" ( value ( "," value )* )? "]"
string  ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{4} )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
"""

SQL = r"""
root    ::= "SELECT " columns " FROM " ident where? order? limit? ";"?
columns ::= "*" | ident ( ", " ident )*
where   ::= " WHERE " cond ( " AND " cond )*
cond    ::= ident " " op " " val
op      ::= "=" | "<" | ">" | "<=" | ">=" | "<>"
val     ::= [0-9]+ | "'" [a-z ]* "'"
order   ::= " ORDER BY " ident ( " ASC" | " DESC" )?
limit   ::= " LIMIT " [1-9] [0-9]*
ident   ::= [a-z_] [a-z0-9_]*
"""
SQL_LARK = r"""
start: "SELECT " columns " FROM " IDENT where? order? limit? ";"?
columns: "*" | IDENT (", " IDENT)*
where: " WHERE " cond (" AND " cond)*
cond: IDENT " " OP " " VAL
OP: "=" | "<" | ">" | "<=" | ">=" | "<>"
VAL: /[0-9]+/ | /'[a-z ]*'/
order: " ORDER BY " IDENT (" ASC" | " DESC")?
limit: " LIMIT " /[1-9][0-9]*/
IDENT: /[a-z_][a-z0-9_]*/
"""

TOOL_CALL = r"""
root  ::= "<tool_call>{\"name\":\"" name "\",\"arguments\":" args "}</tool_call>"
name  ::= "get_weather" | "search" | "send_email"
args  ::= "{" ( pair ( "," pair )* )? "}"
pair  ::= "\"" [a-z_]+ "\":" ( "\"" [a-zA-Z0-9 ]* "\"" | [0-9]+ | "true" | "false" )
"""
TOOL_CALL_LARK = r"""
start: "<tool_call>{\"name\":\"" NAME "\",\"arguments\":" args "}</tool_call>"
NAME: "get_weather" | "search" | "send_email"
args: "{" (pair ("," pair)*)? "}"
pair: /"[a-z_]+":/ (/"[a-zA-Z0-9 ]*"/ | /[0-9]+/ | "true" | "false")
"""


def lark_checker(grammar: str):
    parser = lark.Lark(grammar, parser="earley", lexer="dynamic")

    def check(text: str) -> bool:
        try:
            parser.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True

    return check


def json_checker(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


CASES = {  # name: (GBNF, independent checker factory, valid samples, invalid samples)
    "arithmetic": (ARITHMETIC, lambda: lark_checker(ARITHMETIC_LARK), ["1+2*3", "-(4.5/2)-7", "((1))"],
                   ["1+", "(1", "1..2", "+1", ""]),
    "json": (JSON_GBNF, lambda: json_checker, ['{"a":[1,-2.5e3,true,null,"x\\n"]}', '"\\u00e9"', "[]"],
             ['{"a":1,}', "[01]", '"\\x"', "tru"]),
    "sql": (SQL, lambda: lark_checker(SQL_LARK),
            ["SELECT * FROM users;", "SELECT id, name FROM t WHERE age >= 18 AND name = 'al' ORDER BY id DESC LIMIT 10"],
            ["SELECT FROM t", "SELECT * FROM 1t", "SELECT * FROM t LIMIT 0"]),
    "tool_call": (TOOL_CALL, lambda: lark_checker(TOOL_CALL_LARK),
                  ['<tool_call>{"name":"search","arguments":{"q":"cats","n":3}}</tool_call>',
                   '<tool_call>{"name":"get_weather","arguments":{}}</tool_call>'],
                  ['<tool_call>{"name":"rm","arguments":{}}</tool_call>', '<tool_call>{"name":"search"}</tool_call>']),
}
CLOSERS = tuple(b'")]}; ')


def walk(compiled, text: str) -> bool:
    matcher = matcher_for(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()


def sample(compiled, rng: random.Random, max_steps: int = 300) -> str | None:
    """One random generation: uniform over allowed tokens, leaning toward closers and EOS; None if unfinished."""
    info = compiled.tokenizer_info
    matcher = matcher_for(compiled)
    mask = allocate_token_bitmask(1, info.vocab_size)
    out = b""
    for _ in range(max_steps):
        matcher.fill_bitmask(mask, 0)
        bits = ((mask[0].unsqueeze(1) >> torch.arange(32, dtype=torch.int32)) & 1).flatten()[: info.vocab_size]
        allowed = bits.nonzero().flatten().tolist()
        assert allowed, "an empty mask: the grammar reached a dead end"
        eos = [t for t in allowed if t in info.eos_token_ids]
        text = [t for t in allowed if t not in info.eos_token_ids]
        closers = [t for t in text if (info.token_bytes[t] or b"x")[-1] in CLOSERS]
        if eos and (rng.random() < 0.5 or not text):
            assert matcher.accept_token(eos[0]) and matcher.is_terminated()
            return out.decode("utf-8")
        pick = rng.choice(closers if closers and rng.random() < 0.3 else text)
        assert matcher.accept_token(pick)
        out += info.token_bytes[pick] or b""
    return None


@pytest.fixture(scope="module")
def ebnf_compiler(info):
    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        yield comp


@pytest.mark.parametrize("name", list(CASES))
def test_ebnf_grammar_generates_only_what_an_independent_parser_accepts(ebnf_compiler, name):
    gbnf, make_checker, valid, invalid = CASES[name]
    compiled = ebnf_compiler.compile(GrammarSpec.ebnf(gbnf))
    check = make_checker()
    for text in valid:
        assert check(text) and walk(compiled, text), text
    for text in invalid:
        assert not check(text) and not walk(compiled, text), text
    rng = random.Random(sorted(CASES).index(name))
    outputs = [sample(compiled, rng) for _ in range(40)]
    finished = [o for o in outputs if o is not None]
    assert len(finished) >= 20, f"only {len(finished)} of 40 random walks finished"
    bad = [o for o in finished if not check(o)]
    assert not bad, bad[:5]
    assert len(set(finished)) >= 5  # the walks explored the grammar, not one string


def test_lark_grammars_pass_through(ebnf_compiler):
    compiled = ebnf_compiler.compile(GrammarSpec.ebnf('start: "ab" NUM ("," NUM)*\nNUM: /[0-9]+/\n'))
    assert walk(compiled, "ab1,22,333") and not walk(compiled, "ab") and not walk(compiled, "ab1,")


def test_xgrammar_style_ebnf(ebnf_compiler):
    grammar = 'root ::= "[" item ("," item)* "]"\nitem ::= [a-z]{2,3} | "\\u00e9"\n'
    compiled = ebnf_compiler.compile(GrammarSpec.ebnf(grammar))
    assert walk(compiled, "[ab,xyz,é]") and not walk(compiled, "[a]") and not walk(compiled, "[abcd]")


@pytest.mark.parametrize("grammar,where", [
    ('root ::= "abc', "line 1, column 10"),
    ('root ::= ( "a" | "b"', "line 1, column"),
    ('root ::= item\nitem ::= "x" | undefined-rule', "line 2, column 16"),
    ('item ::= "x"', "no 'root' rule"),
    ('root ::= [z-a]', "line 1, column 10"),
    ('root ::= "a"{3,1}', "line 1, column 13"),
    ('root ::= "a" @', "line 1, column 14"),
    ("start: (\n", "line 1, column 9"),
    ('start: foo\n', "line 1, column 8"),
    ("", "empty"),
])
def test_malformed_grammars_name_the_position(ebnf_compiler, grammar, where):
    with pytest.raises(GrammarError) as err:
        ebnf_compiler.compile(GrammarSpec.ebnf(grammar))
    assert err.value.code == "invalid_grammar" and err.value.param == "ebnf"
    assert where in err.value.message, err.value.message


def test_a_grammar_that_derives_nothing_is_refused(ebnf_compiler):
    with pytest.raises(GrammarError) as err:
        ebnf_compiler.compile(GrammarSpec.ebnf('root ::= "(" root ")"'))
    assert err.value.code == "invalid_grammar"


def test_the_outlines_backend_refuses_grammars(info):
    with GrammarCompiler(info, max_workers=1, isolate=False, backend="outlines") as comp, \
            pytest.raises(GrammarError) as err:
        comp.compile(GrammarSpec.ebnf('root ::= "a"'))
    assert err.value.code == "invalid_grammar" and err.value.param == "ebnf"
