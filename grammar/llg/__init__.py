"""The llguidance backend (the default): Lark grammars over regex lexemes, token masks computed lazily per state."""
