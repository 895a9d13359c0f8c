"""sprig.grammar: constraints (JSON Schema, regex, choices, any JSON object, EBNF) → per-request matchers → logit masks.

    info = TokenizerInfo.from_tokenizer(tokenizer_or_path, eos_token_ids=[2], vocab_size=model_vocab)
    compiler = GrammarCompiler(info)
    compiled = compiler.submit(GrammarSpec.json_schema(schema)).result()
    matcher = matcher_for(compiled)         # the compiled grammar's backend picks the matcher
    bitmask = allocate_token_bitmask(batch, info.vocab_size)
    matcher.fill_bitmask(bitmask, row); apply_token_bitmask_(logits, bitmask); matcher.accept_token(tok)

Names that need torch (the matcher, the bitmask) load lazily, so compile workers never import torch, and
so do the outlines backend's: the default (llguidance) path never imports outlines-core.
"""

from __future__ import annotations

from typing import Any

from sprig.grammar.backend import Backend
from sprig.grammar.compile.compiler import GrammarCompiler, matcher_for
from sprig.grammar.errors import GrammarError, GrammarErrorCode, GrammarTooComplex
from sprig.grammar.llg.lark import CompiledLark
from sprig.grammar.spec import GrammarKind, GrammarSpec, JsonOptions, Whitespace
from sprig.grammar.vocabulary import TokenizerInfo

_LAZY = {"GrammarMatcher": "matcher", "JumpForward": "matcher", "allocate_token_bitmask": "matcher",
         "CompiledGrammar": "outlines.automaton", "apply_token_bitmask_": None,
         "schema_ordered_dumps": "schema.ordering"}


def __getattr__(name: str) -> Any:
    if name == "apply_token_bitmask_":
        from sprig.kernels.bitmask import apply_token_bitmask_

        return apply_token_bitmask_
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"sprig.grammar.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'sprig.grammar' has no attribute {name!r}")


__all__ = ["Backend", "CompiledLark", "GrammarCompiler", "GrammarError", "GrammarErrorCode", "GrammarKind",
           "GrammarSpec", "GrammarTooComplex", "JsonOptions", "TokenizerInfo", "Whitespace", "matcher_for", *_LAZY]
