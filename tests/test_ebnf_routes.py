"""`ebnf` end to end: through `Engine`, native `/generate` and the OpenAI routes (SGLang's `ebnf`, vLLM's
`structured_outputs.grammar` and `guided_grammar`), every output is accepted by an independent parser (`lark`).

The grammars here describe finite languages (bounded repetitions), so even the random-weight model must finish each
generation inside its token budget: the mask leaves nothing but EOS once the text is complete.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from test_grammar_ebnf import lark_checker
from test_server_helpers import ServerProcess

from sprig.runtime.engine.engine import Engine

ARITHMETIC = r"""
root ::= expr
expr ::= term (("+" | "-") term){0,2}
term ::= factor (("*" | "/") factor){0,2}
factor ::= [0-9]{1,3} | "(" [0-9]{1,2} ("+" | "-") [0-9]{1,2} ")"
"""
ARITHMETIC_LARK = r"""
?start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUM | "(" expr ")"
NUM: /[0-9]+/
"""
SQL = r"""
root ::= "SELECT " cols " FROM " ident where? ";"
cols ::= "*" | ident (", " ident){0,2}
where ::= " WHERE " ident " = " [0-9]{1,3}
ident ::= [a-z]{1,6}
"""
SQL_LARK = r"""
start: "SELECT" cols "FROM" IDENT where? ";"
cols: "*" | IDENT ("," IDENT)*
where: "WHERE" IDENT "=" NUM
IDENT: /[a-z][a-z0-9_]*/
NUM: /[0-9]+/
%ignore " "
"""
TOOL_CALL = r"""
root ::= "<tool_call>{\"name\":\"" name "\",\"arguments\":{\"q\":\"" [a-z ]{0,12} "\"}}</tool_call>"
name ::= "search" | "lookup"
"""


def tool_call_check(text: str) -> bool:
    match = re.fullmatch(r"<tool_call>(.*)</tool_call>", text, re.S)
    if match is None:
        return False
    try:
        call = json.loads(match.group(1))
    except ValueError:
        return False
    return call.get("name") in ("search", "lookup") and set(call) == {"name", "arguments"} \
        and set(call["arguments"]) == {"q"}


CASES = {"arithmetic": (ARITHMETIC, lark_checker(ARITHMETIC_LARK)), "sql": (SQL, lark_checker(SQL_LARK)),
         "tool_call": (TOOL_CALL, tool_call_check)}
BUDGET = {"max_new_tokens": 96, "temperature": 1.0}


def assert_all_parse(results: list[dict], check) -> None:
    for r in results:
        assert r["meta_info"]["finish_reason"]["type"] == "stop", r["meta_info"]["finish_reason"]
        assert check(r["text"]), r["text"]


def test_the_three_grammars_are_told_apart_by_their_parsers():
    valid = {"arithmetic": "12*(3+4)-5", "sql": "SELECT id, name FROM users WHERE age = 18;",
             "tool_call": '<tool_call>{"name":"search","arguments":{"q":"red fox"}}</tool_call>'}
    for name, (_, check) in CASES.items():
        assert check(valid[name])
        assert not any(check(valid[other]) for other in CASES if other != name)


@pytest.mark.parametrize("name", list(CASES))
def test_engine_outputs_parse(tiny_paths, name):
    grammar, check = CASES[name]
    with Engine(str(tiny_paths["tiny-llama"])) as engine:
        results = engine.generate([f"write {name} {i}:" for i in range(6)],
                                  [{**BUDGET, "ebnf": grammar, "seed": i} for i in range(6)])
    assert_all_parse(results, check)
    assert len({r["text"] for r in results}) >= 2  # sampled, not one forced string


@pytest.fixture(scope="module")
def http():
    with ServerProcess() as server, httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def test_generate_route_outputs_parse(http):
    grammar, check = CASES["sql"]
    out = http.post("/generate", json={"text": ["q1", "q2", "q3"],
                                       "sampling_params": {**BUDGET, "ebnf": grammar, "seed": 3}})
    assert out.status_code == 200, out.text
    assert_all_parse(out.json(), check)


@pytest.mark.parametrize("field", ["ebnf", "guided_grammar", "structured_outputs"])
def test_openai_routes_outputs_parse(http, field):
    grammar, check = CASES["arithmetic"]
    extra = {"structured_outputs": {"grammar": grammar}} if field == "structured_outputs" else {field: grammar}
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "compute"}],
                                                   "max_tokens": 96, "n": 3, "seed": 1, **extra})
    assert chat.status_code == 200, chat.text
    contents = [c["message"]["content"] for c in chat.json()["choices"]]
    assert all(c["finish_reason"] == "stop" for c in chat.json()["choices"])
    assert all(check(text) for text in contents), contents
    completion = http.post("/v1/completions", json={"prompt": "2+2=", "max_tokens": 96, "seed": 2, **extra})
    assert completion.status_code == 200, completion.text
    assert check(completion.json()["choices"][0]["text"])


@pytest.mark.parametrize("route,body,param", [
    ("/generate", {"text": "x", "sampling_params": {"ebnf": 'root ::= "abc'}}, "ebnf"),
    ("/v1/completions", {"prompt": "x", "ebnf": 'root ::= ( "a" | "b"'}, "ebnf"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "structured_outputs": {"grammar": 'root ::= "a" @'}}, "structured_outputs.grammar"),
    ("/v1/completions", {"prompt": "x", "guided_grammar": "start: (\n"}, "guided_grammar"),
])
def test_a_malformed_grammar_is_a_400_naming_the_position(http, route, body, param):
    r = http.post(route, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["code"] == "invalid_grammar"
    assert "line 1, column" in error["message"]


def test_two_constraints_are_refused(http):
    r = http.post("/v1/completions", json={"prompt": "x", "regex": "a+", "ebnf": 'root ::= "a"'})
    assert r.status_code == 400 and r.json()["error"]["code"] == "conflicting_parameters"
