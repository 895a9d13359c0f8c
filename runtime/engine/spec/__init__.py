"""Speculative decoding: proposers guess the next tokens, the target verifies them all in one forward.

`speculator.py` ties it into the step loop (draft KV pages, verification rows, give-back), `verify.py` decides
which draft tokens the target keeps, `ngram.py` and `draft_model.py` propose, `adaptive.py` backs off, `tally.py`
holds each request's reported figures.
"""
