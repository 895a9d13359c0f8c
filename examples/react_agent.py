"""A ReAct-style agent: each turn the model thinks, picks a tool with `select` and writes the tool's arguments
with `json_schema`; Python runs the tool and appends the observation. The whole loop is one program, so every
turn reuses the KV of everything before it.

    python examples/react_agent.py
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sprig

FACTS = {"paris": "Paris has about 2.1 million inhabitants.", "tokyo": "Tokyo has about 14 million inhabitants."}
_OPS: dict[type, Callable[[float, float], float]] = {ast.Add: operator.add, ast.Sub: operator.sub,
                                                     ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculator(expression: str) -> str:
    """Evaluate + - * / over numbers (no names, no calls)."""
    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError("unsupported expression")

    return str(ev(ast.parse(expression, mode="eval").body))


def search(query: str) -> str:
    """Look a city up in a tiny fact table."""
    return next((fact for key, fact in FACTS.items() if key in query.lower()), "No result.")


@dataclass(frozen=True)
class Tool:
    """A tool the agent can call: its function and the JSON Schema of its arguments."""

    run: Callable[[str], str]
    arg: str
    schema: dict[str, Any]


def _schema(arg: str) -> dict[str, Any]:
    return {"type": "object", "properties": {arg: {"type": "string", "maxLength": 40}}, "required": [arg],
            "additionalProperties": False}


TOOLS = {"calculator": Tool(calculator, "expression", _schema("expression")),
         "search": Tool(search, "query", _schema("query"))}


def call_tool(name: str, raw_args: str) -> str:
    """Run a tool on the model's JSON arguments; any failure becomes the observation."""
    tool = TOOLS[name]
    try:
        return tool.run(json.loads(raw_args)[tool.arg])
    except (ValueError, KeyError, TypeError, ZeroDivisionError, SyntaxError) as e:
        return f"error: {type(e).__name__}"


@sprig.function
def agent(s: sprig.ProgramState, question: str, max_turns: int = 3) -> list[dict[str, str]]:
    s += sprig.system("Answer the question. Tools: calculator (arithmetic), search (city facts), or finish.")
    s += sprig.user(question)
    trace = []
    with s.assistant():
        for turn in range(max_turns):
            s += f"\nThought {turn + 1}:" + sprig.gen("thought", max_tokens=16, stop="\n")
            s += "\nAction:" + sprig.select("tool", [" calculator", " search", " finish"])
            tool = s["tool"].strip()  # reading waits for the select: control flow follows the model
            if tool == "finish":
                break
            s += "\nInput: " + sprig.gen("args", json_schema=TOOLS[tool].schema, max_tokens=48)
            observation = call_tool(tool, s["args"])
            s += f"\nObservation: {observation}"
            trace.append({"tool": tool, "args": s["args"], "observation": observation})
        s += "\nFinal answer:" + sprig.gen("answer", max_tokens=24, stop="\n")
    return trace


def main(engine: Any) -> dict[str, Any]:
    """Run the agent on one question; returns its tool calls and answer."""
    st = agent.run(question="How many people live in Paris and Tokyo together?", backend=engine, temperature=0)
    for step in st.ret_value:
        print(f"{step['tool']}({step['args']!r}) -> {step['observation']}")
    print(f"answer: {st['answer']!r}")
    return {"trace": st.ret_value, "answer": st["answer"], "messages": st.messages()}


if __name__ == "__main__":
    with sprig.Engine() as engine:  # the default model, SmolLM2-135M-Instruct; shut down cleanly at the end
        main(engine)
