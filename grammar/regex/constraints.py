"""`regex` and `choices` constraints as checked regex trees, for both backends.

The outlines backend renders the tree as one regex, the llguidance backend makes it one lexeme. Budgets are
checked before any native compile starts: the tree's size and, for the user's own regexes, a bounded subset
construction (where `(a|b)*a(a|b){40}` explodes).
"""

from __future__ import annotations

from sprig.grammar.errors import GrammarError, GrammarErrorCode, too_complex
from sprig.grammar.regex import fsm, ir
from sprig.grammar.regex.char_classes import Dialect
from sprig.grammar.regex.pattern import PatternSyntaxError, PatternUnsupported, regex_language
from sprig.grammar.spec import GrammarKind, GrammarSpec

MAX_WEIGHT = 200_000  # why: character positions; beyond this the token automaton takes too long to build
MAX_REGEX_DFA_STATES = 10_000
MAX_CHOICES = 10_000


def constraint_tree(spec: GrammarSpec) -> ir.Node:
    """The checked regex tree of a `regex` or `choices` spec."""
    if spec.kind is GrammarKind.CHOICES:
        return _choices(spec.spec)
    if spec.kind is GrammarKind.REGEX:
        return _regex(str(spec.spec))
    raise ValueError(f"constraint_tree takes regex and choices specs, not {spec.kind.value}")


def _choices(choices: object) -> ir.Node:
    if isinstance(choices, str) or not isinstance(choices, tuple | list) or not choices:
        raise GrammarError("choices must be a non-empty list of strings", GrammarErrorCode.INVALID_CHOICES)
    if len(choices) > MAX_CHOICES or sum(len(c) for c in choices if isinstance(c, str)) > MAX_WEIGHT:
        raise too_complex(f"more than {MAX_CHOICES} choices or {MAX_WEIGHT} characters in total")
    if any(not isinstance(c, str) for c in choices):
        raise GrammarError("choices must be strings", GrammarErrorCode.INVALID_CHOICES)
    return ir.alt(*(ir.lit(c) for c in choices))


def _regex(pattern: str) -> ir.Node:
    try:
        node = regex_language(pattern, Dialect.PYTHON, search=False)
    except PatternSyntaxError as exc:
        raise GrammarError(f"invalid regex: {exc}", GrammarErrorCode.INVALID_REGEX) from None
    except PatternUnsupported as exc:
        raise GrammarError(f"unsupported regex construct: {exc}", GrammarErrorCode.INVALID_REGEX) from None
    if node.weight > MAX_WEIGHT:
        raise too_complex(f"about {node.weight} character positions (limit {MAX_WEIGHT})")
    fsm.determinize(node, MAX_REGEX_DFA_STATES)  # why: raises early where the DFA would explode
    if ir.is_never(node):
        raise GrammarError("the regex matches no text", GrammarErrorCode.INVALID_REGEX)
    return node

