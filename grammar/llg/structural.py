"""A `StructuralTag` as one grammar: lazy lexemes for the text up to a trigger, each structure's schema embedded.

TRIGGERED: ``start: seg* TAIL?`` (``seg?`` without parallel), where a ``seg`` is a lazy lexeme matching free
text up to and including the first trigger (outside code fences), then the rest of a structure that trigger
opens; ``TAIL`` is free text containing no trigger outside code fences. FORCED: structures from the first token.
Every schema goes through sprig's own JSON-Schema compiler (`schema/to_cfg.py`), so arguments are exact.
"""

from __future__ import annotations

from sprig.grammar.errors import GrammarError
from sprig.grammar.llg.cfg import Grammar, Lazy, LexAnd, Term, cat, choice, lex, opt, repeat
from sprig.grammar.regex import charset, ir
from sprig.grammar.spec import JsonOptions
from sprig.grammar.structural import StructuralTag, Structure, TagMode

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
            values.append(grammar.embed(schema_to_grammar(s.schema, opts), f"s{i}_"))
        except GrammarError as exc:
            raise exc.with_param(f"structural_tag.structures.{i}.schema") from None
    runs: dict[str, Term] = {}
    for t in tag.triggers:
        run = _run(tag, t, values)
        if run is not None:
            runs[t] = run
    if tag.mode is TagMode.FORCED:
        one = choice(*(cat(lex(ir.lit(t)), r) for t, r in runs.items()))
        gap = opt(lex(ir.rep(ir.chars(charset.of_chars(" \n")), 1, 2)))
        body = cat(one, repeat(cat(gap, one), 0, None)) if tag.parallel else one
        grammar.add("start", body)
    else:
        before = _text_before_trigger(tag)
        seg = choice(*(cat(Lazy(ir.seq(before, ir.lit(t))), r) for t, r in runs.items()))
        segs = repeat(seg, 0, None if tag.parallel else 1)
        any_trigger = ir.alt(*(ir.lit(t) for t in runs))
        tail = LexAnd((ANY_TEXT,), (ir.seq(before, any_trigger, ANY_TEXT),))
        grammar.add("start", cat(segs, opt(tail)))
    grammar.prune()
    return grammar


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
