"""The outlines-core backend: a constraint as one regex, compiled eagerly into a token automaton.

Imported only when a `GrammarCompiler` is built with `backend="outlines"`.
"""
