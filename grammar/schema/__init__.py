"""JSON Schema semantics: references, value sets, keyword evaluation, formats, and the CFG the llguidance backend reads."""
