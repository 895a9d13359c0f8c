"""The outlines backend's compile: spec → one regex → outlines-core token automaton.

`build_automaton` runs in a compile worker (no torch) and sends back the regex and the pickled index;
`finish` turns that into a `CompiledGrammar` in the compiler's process.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from typing import Any

from sprig.grammar.errors import GrammarError, GrammarErrorCode, too_complex
from sprig.grammar.outlines.automaton import CompiledGrammar, build_index, outlines_vocabulary
from sprig.grammar.outlines.schema_regex import json_object_regex_tree, schema_to_regex_tree
from sprig.grammar.regex import charset, ir
from sprig.grammar.regex.constraints import constraint_tree
from sprig.grammar.spec import GrammarKind, GrammarSpec
from sprig.grammar.vocabulary import TokenizerInfo

NO_NUL = charset.complement(((0, 0),))
_VOCABULARIES: dict[str, Any] = {}  # per process: tokenizer fingerprint -> outlines Vocabulary


@dataclass
class BuildResult:
    """What a worker sends back: the regex and the serialized automaton."""

    regex: str
    index_binary: bytes
    seconds: float


def regex_tree(spec: GrammarSpec) -> ir.Node:
    """The checked regex tree of any spec this backend takes (all but `ebnf`)."""
    if spec.kind is GrammarKind.JSON_SCHEMA:
        return schema_to_regex_tree(str(spec.spec), spec.options)
    if spec.kind is GrammarKind.JSON_OBJECT:
        return json_object_regex_tree(spec.options)
    if spec.kind is GrammarKind.EBNF:
        raise GrammarError("ebnf grammars need the llguidance backend", GrammarErrorCode.INVALID_GRAMMAR)
    if spec.kind is GrammarKind.STRUCTURAL_TAG:
        raise GrammarError("structural tags (and tool calls in auto mode) need the llguidance backend",
                           GrammarErrorCode.INVALID_GRAMMAR, param="structural_tag")
    if spec.kind is GrammarKind.CHOICES and any("\x00" in c for c in spec.spec if isinstance(c, str)):
        raise GrammarError("choices must not contain NUL characters on the outlines backend (its end sentinel)",
                           GrammarErrorCode.INVALID_CHOICES)
    node = without_nul(constraint_tree(spec))
    if ir.is_never(node):
        raise GrammarError("the regex matches no text without NUL (the outlines backend's end sentinel)",
                           GrammarErrorCode.INVALID_REGEX)
    return node


def without_nul(node: ir.Node) -> ir.Node:
    """`node` with NUL taken out of every class: NUL is this backend's end-of-match sentinel (automaton.py)."""
    if isinstance(node, ir.Chars):
        return ir.chars(charset.intersect(node.ranges, NO_NUL))
    if isinstance(node, ir.Seq):
        return ir.seq(*(without_nul(i) for i in node.items))
    if isinstance(node, ir.Alt):
        return ir.alt(*(without_nul(i) for i in node.items))
    assert isinstance(node, ir.Rep)
    return ir.rep(without_nul(node.item), node.lo, node.hi)


def spec_to_regex(spec: GrammarSpec) -> str:
    """The Rust-syntax regex (full-match semantics) for any spec this backend takes."""
    try:
        return regex_tree(spec).render()
    except GrammarError as exc:
        raise exc.with_param(spec.param) from None
    except RecursionError:
        raise too_complex("constraint nested too deeply").with_param(spec.param) from None


def prepare_worker(info: TokenizerInfo) -> None:
    """Build the tokenizer's outlines vocabulary once per worker, before the first compile."""
    _vocabulary(info)


def build_automaton(spec: GrammarSpec, info: TokenizerInfo) -> BuildResult:
    """Spec → regex → outlines-core Index, serialized (what a compile worker runs for this backend)."""
    start = time.perf_counter()
    regex = spec_to_regex(spec)
    try:
        index = build_index(regex, _vocabulary(info))
    except GrammarError as exc:
        raise exc.with_param(spec.param) from None
    return BuildResult(regex, pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL), time.perf_counter() - start)


def finish(spec: GrammarSpec, result: BuildResult, info: TokenizerInfo) -> CompiledGrammar:
    """The worker's result as a `CompiledGrammar` for `info` (in the compiler's process)."""
    index = pickle.loads(result.index_binary)
    return CompiledGrammar(spec, result.regex, index, info, result.seconds,
                           len(result.index_binary) + len(result.regex))


def _vocabulary(info: TokenizerInfo) -> Any:
    vocabulary = _VOCABULARIES.get(info.fingerprint)
    if vocabulary is None:
        vocabulary = _VOCABULARIES[info.fingerprint] = outlines_vocabulary(info)
    return vocabulary
