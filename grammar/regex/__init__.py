"""Regular languages: code-point sets, shorthand classes, the regex tree, pattern parsing, automata.

Shared by the JSON Schema room and both backends; imports nothing of theirs.
"""
