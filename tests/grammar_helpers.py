"""What several grammar tests share: walking a text through a compiled grammar token by token."""

from __future__ import annotations

from sprig.grammar.matcher import GrammarMatcher


def walk(compiled, text: str) -> bool:
    """Tokenize `text` as the model would, feed the tokens to a fresh matcher, then require that it may end."""
    matcher = GrammarMatcher(compiled)
    ids = compiled.tokenizer_info.tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.accept_token(t) for t in ids) and matcher.can_finish()
