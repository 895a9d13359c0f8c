"""Spec → regex → token automaton. Runs inside a compile worker (see `pool.py`); imports no torch.

Budgets checked here, before outlines-core (whose native compile cannot be interrupted) starts:
the size of the regex tree (character positions, counted repetitions multiplied out) and, for the user's
own regexes, a bounded subset construction, which is where `(a|b)*a(a|b){40}` explodes.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass

from sprig.grammar import charset, fsm
from sprig.grammar import regex_ir as ir
from sprig.grammar.automaton import build_index, outlines_vocabulary
from sprig.grammar.char_classes import Dialect
from sprig.grammar.errors import GrammarError, GrammarErrorCode, too_complex
from sprig.grammar.formats import SUPPORTED_FORMATS, format_language
from sprig.grammar.json_schema import MAX_WEIGHT, json_object_regex_tree, schema_to_regex_tree
from sprig.grammar.json_text import json_string
from sprig.grammar.llg import LarkBuild, build_lark
from sprig.grammar.pattern import PatternSyntaxError, PatternUnsupported, regex_language
from sprig.grammar.spec import GrammarKind, GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo

MAX_REGEX_DFA_STATES = 10_000
MAX_CHOICES = 10_000
NO_NUL = charset.complement(((0, 0),))  # why: NUL is the end-of-match sentinel (see automaton.py)


@dataclass
class BuildResult:
    """What a worker sends back: the regex and the serialized automaton."""

    regex: str
    index_binary: bytes
    seconds: float


def spec_to_regex(spec: GrammarSpec) -> str:
    """The Rust-syntax regex (full-match semantics) for any kind of spec."""
    try:
        return _tree(spec).render()
    except GrammarError as exc:
        raise exc.with_param(spec.param) from None
    except RecursionError:
        raise too_complex("constraint nested too deeply").with_param(spec.param) from None


def regex_tree(spec: GrammarSpec) -> ir.Node:
    """The checked regex tree of a `regex` or `choices` spec (the llguidance backend makes it one lexeme)."""
    return _tree(spec)


def _tree(spec: GrammarSpec) -> ir.Node:
    if spec.kind is GrammarKind.JSON_SCHEMA:
        return schema_to_regex_tree(str(spec.spec), spec.options)
    if spec.kind is GrammarKind.JSON_OBJECT:
        return json_object_regex_tree(spec.options)
    if spec.kind is GrammarKind.CHOICES:
        return _choices(spec.spec)
    if spec.kind is GrammarKind.EBNF:
        raise GrammarError("ebnf grammars need the llguidance backend", GrammarErrorCode.INVALID_GRAMMAR)
    return _regex(str(spec.spec))


def _choices(choices: object) -> ir.Node:
    if isinstance(choices, str) or not isinstance(choices, tuple | list) or not choices:
        raise GrammarError("choices must be a non-empty list of strings", GrammarErrorCode.INVALID_CHOICES)
    if len(choices) > MAX_CHOICES or sum(len(c) for c in choices if isinstance(c, str)) > MAX_WEIGHT:
        raise too_complex(f"more than {MAX_CHOICES} choices or {MAX_WEIGHT} characters in total")
    if any(not isinstance(c, str) or "\x00" in c for c in choices):
        raise GrammarError("choices must be strings without NUL characters", GrammarErrorCode.INVALID_CHOICES)
    return ir.alt(*(ir.lit(c) for c in choices))


def _regex(pattern: str) -> ir.Node:
    try:
        node = regex_language(pattern, Dialect.PYTHON, search=False)
    except PatternSyntaxError as exc:
        raise GrammarError(f"invalid regex: {exc}", GrammarErrorCode.INVALID_REGEX) from None
    except PatternUnsupported as exc:
        raise GrammarError(f"unsupported regex construct: {exc}", GrammarErrorCode.INVALID_REGEX) from None
    node = _without_nul(node)
    if node.weight > MAX_WEIGHT:
        raise too_complex(f"about {node.weight} character positions (limit {MAX_WEIGHT})")
    fsm.determinize(node, MAX_REGEX_DFA_STATES)  # why: raises early where the DFA would explode
    if ir.is_never(node):
        raise GrammarError("the regex matches no text", GrammarErrorCode.INVALID_REGEX)
    return node


def _without_nul(node: ir.Node) -> ir.Node:
    if isinstance(node, ir.Chars):
        return ir.chars(charset.intersect(node.ranges, NO_NUL))
    if isinstance(node, ir.Seq):
        return ir.seq(*(_without_nul(i) for i in node.items))
    if isinstance(node, ir.Alt):
        return ir.alt(*(_without_nul(i) for i in node.items))
    assert isinstance(node, ir.Rep)
    return ir.rep(_without_nul(node.item), node.lo, node.hi)


_VOCABULARIES: dict[str, object] = {}  # per worker process: tokenizer fingerprint -> outlines Vocabulary


def build(spec: GrammarSpec, info: TokenizerInfo, backend: str = "outlines") -> BuildResult | LarkBuild:
    """Spec → regex → outlines-core Index, serialized, or spec → Lark text (what a compile worker runs)."""
    if backend == "llguidance":
        return build_lark(spec)
    start = time.perf_counter()
    regex = spec_to_regex(spec)
    vocabulary = _VOCABULARIES.get(info.fingerprint)
    if vocabulary is None:
        vocabulary = _VOCABULARIES[info.fingerprint] = outlines_vocabulary(info)
    try:
        index = build_index(regex, vocabulary)  # type: ignore[arg-type]
    except GrammarError as exc:
        raise exc.with_param(spec.param) from None
    return BuildResult(regex, pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL), time.perf_counter() - start)


_WORKER_INFO: list[TokenizerInfo] = []


def init_worker(info: TokenizerInfo, backend: str = "outlines") -> None:
    """Runs once in each compile worker process: remember the tokenizer, build its vocabulary."""
    _WORKER_INFO[:] = [info]
    for name in SUPPORTED_FORMATS:  # why: parsing the format regexes once here keeps them out of compile times
        json_string(format_language(name))
    if backend == "outlines":
        _VOCABULARIES[info.fingerprint] = outlines_vocabulary(info)


def build_in_worker(spec: GrammarSpec, backend: str = "outlines") -> BuildResult | LarkBuild:
    return build(spec, _WORKER_INFO[0], backend)
