"""A `StructuralTag` as one grammar: lazy lexemes for the text up to a trigger, each structure's schema embedded.

TRIGGERED: ``start: seg* TAIL?`` (``seg?`` without parallel), where a ``seg`` is a lazy lexeme matching free
text up to and including the first trigger (outside code fences), then the rest of a structure that trigger
opens; ``TAIL`` is free text containing no trigger outside code fences. FORCED: structures from the first token.
Every schema goes through sprig's own JSON-Schema compiler (`schema/to_cfg.py`), so arguments are exact; a
``python_kwargs`` structure writes an object's declared properties as keyword arguments with Python's literals.
"""

from __future__ import annotations

import json
import re

from sprig.grammar.errors import GrammarError, GrammarErrorCode
from sprig.grammar.llg.cfg import (
    EMPTY,
    Cat,
    Choice,
    Grammar,
    Lazy,
    Lex,
    LexAnd,
    Repeat,
    Sym,
    Term,
    TokenRef,
    cat,
    choice,
    lex,
    opt,
    repeat,
)
from sprig.grammar.regex import charset, ir
from sprig.grammar.schema.json_text import FALSE, NULL, TRUE
from sprig.grammar.spec import JsonOptions
from sprig.grammar.structural import StructuralTag, Structure, TagMode, ValueSyntax

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERALS = ((NULL, ir.lit("None")), (TRUE, ir.lit("True")), (FALSE, ir.lit("False")))
ANY_TEXT = ir.star(ir.chars(((0, 0x10FFFF),)))
FENCE = ir.lit("```")


def structural_grammar(tag: StructuralTag, options: JsonOptions) -> Grammar:
    """The grammar of the outputs `tag` allows (schemas compiled with `options`; strict ones stricter)."""
    from sprig.grammar.schema.to_cfg import schema_to_grammar

    grammar = Grammar()
    values: list[Term] = []
    for i, s in enumerate(tag.structures):
        opts = JsonOptions(options.whitespace, options.max_whitespace, s.strict or options.strict,
                           options.max_recursion_depth, options.any_value_depth,
                           options.allow_extra_properties and not s.strict)
        try:
            if s.syntax is ValueSyntax.PYTHON_KWARGS:
                values.append(kwargs_grammar(grammar, s.schema, opts, f"s{i}_"))
            else:
                values.append(grammar.embed(schema_to_grammar(s.schema, opts), f"s{i}_"))
        except GrammarError as exc:
            raise exc.with_param(f"structural_tag.structures.{i}.schema") from None
    runs: dict[str, Term] = {}
    for t in tag.triggers:
        run = _run(tag, t, values)
        if run is not None:
            runs[t] = run
    def opener(t: str) -> Term:
        token = tag.token_of(t)
        return lex(ir.lit(t)) if token is None else TokenRef(token)

    if tag.mode is TagMode.FORCED:
        one = choice(*(cat(opener(t), r) for t, r in runs.items()))
        gap = opt(lex(ir.rep(ir.chars(charset.of_chars(" \n")), 1, 2)))
        body = cat(one, repeat(cat(gap, one), 0, None)) if tag.parallel else one
        grammar.add("start", body)
    else:
        before = _text_before_trigger(tag)
        texts = [t for t in runs if tag.token_of(t) is None]
        tail: Term = LexAnd((ANY_TEXT,), (ir.seq(before, ir.alt(*(ir.lit(t) for t in texts)), ANY_TEXT),)) \
            if texts else lex(ANY_TEXT)
        seg = choice(*(cat(Lazy(ir.seq(before, ir.lit(t))), r) if t in texts
                       else cat(opt(tail), opener(t), r) for t, r in runs.items()))  # why: a token ends text
        segs = repeat(seg, 0, None if tag.parallel else 1)
        grammar.add("start", cat(segs, opt(tail)))
    grammar.prune()
    return grammar


def kwargs_grammar(grammar: Grammar, schema_text: str, options: JsonOptions, prefix: str) -> Term:
    """An object schema's declared properties as Python keyword arguments, in declared order (a subset of the
    schema's language: extra keys are never written); each value is its JSON grammar with Python's literals."""
    from sprig.grammar.schema.to_cfg import schema_to_grammar

    schema = json.loads(schema_text)
    if not isinstance(schema, dict) or not isinstance(schema.get("properties", {}), dict):
        raise GrammarError("python keyword arguments need an object schema with properties",
                           GrammarErrorCode.INVALID_SCHEMA)
    shared = {k: schema[k] for k in ("$defs", "definitions") if k in schema}  # why: "#/$defs/..." refs resolve
    required = set(schema.get("required", []))
    props = list(schema.get("properties", {}).items())
    items = []
    for j, (key, sub) in enumerate(props):
        if not _IDENT.fullmatch(key):
            raise GrammarError(f"property {key[:40]!r} is not a Python identifier", GrammarErrorCode.INVALID_SCHEMA)
        body = {**shared, **sub} if isinstance(sub, dict) else sub
        value = grammar.embed(_pythonized(schema_to_grammar(json.dumps(body), options)), f"{prefix}k{j}_")
        items.append(cat(_lit(f"{key}="), value))
    sep = _lit(", ")
    first: Term = EMPTY  # kwargs from property j on, none written yet
    rest: Term = EMPTY  # kwargs from property j on, one already written
    for j in range(len(props) - 1, -1, -1):
        optional = props[j][0] not in required
        grammar.add(f"{prefix}t{j}", choice(cat(sep, items[j], rest), *([rest] if optional else [])))
        grammar.add(f"{prefix}f{j}", choice(cat(items[j], rest), *([first] if optional else [])))
        rest, first = Sym(f"{prefix}t{j}"), Sym(f"{prefix}f{j}")
    return first


def _pythonized(grammar: Grammar) -> Grammar:
    """The JSON literals true / false / null written as Python's True / False / None."""
    grammar.rules = {name: _python_literals(body) for name, body in grammar.rules.items()}
    return grammar


def _python_literals(term: Term) -> Term:
    if isinstance(term, Lex):
        return Lex(_swap(term.regex))
    if isinstance(term, Cat):
        return Cat(tuple(_python_literals(i) for i in term.items))
    if isinstance(term, Choice):
        return Choice(tuple(_python_literals(i) for i in term.items))
    if isinstance(term, Repeat):
        return Repeat(_python_literals(term.item), term.lo, term.hi)
    return term


def _swap(node: ir.Node) -> ir.Node:
    for json_word, python_word in _LITERALS:
        if node == json_word:
            return python_word
    if isinstance(node, ir.Alt):
        return ir.alt(*(_swap(i) for i in node.items))
    return node


def _run(tag: StructuralTag, trigger: str, values: list[Term]) -> Term | None:
    """What follows `trigger`: one structure it opens, or an envelope's run of structures."""
    def whole(i: int, s: Structure, skip: int) -> Term:
        return cat(_lit(s.begin[skip:]), values[i], _lit(s.end))

    if tag.envelope is None:
        opened = [whole(i, s, len(trigger)) for i, s in enumerate(tag.structures) if s.begin.startswith(trigger)]
        return choice(*opened) if opened else None
    env = tag.envelope
    if not env.prefix.startswith(trigger):
        return None
    item = choice(*(whole(i, s, 0) for i, s in enumerate(tag.structures)))
    items = cat(item, repeat(cat(_lit(env.separator), item), 0, None)) if tag.parallel else item
    return cat(_lit(env.prefix[len(trigger):]), items, _lit(env.suffix))


def _lit(text: str) -> Term:
    return lex(ir.lit(text))


def _text_before_trigger(tag: StructuralTag) -> ir.Node:
    """Free text a trigger may follow: any text, or with fences only text that closes every fence it opens."""
    if not tag.fence_aware:
        return ANY_TEXT
    tick = charset.of_chars("`")
    not_tick = ir.chars(charset.complement(tick))
    no_fence = ir.seq(ir.star(ir.alt(not_tick, ir.seq(ir.char("`"), not_tick),
                                     ir.seq(ir.lit("``"), not_tick))), ir.rep(ir.char("`"), 0, 2))
    return ir.seq(no_fence, ir.star(ir.seq(FENCE, no_fence, FENCE, no_fence)))
