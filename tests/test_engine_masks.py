"""Grammar masks filled beside the forward (a worker thread, as on CUDA) or when the sampler takes them (the
CPU default) give the same tokens: only where the fill runs differs."""

from __future__ import annotations

import json

from sprig import Engine
from sprig.runtime.engine.constraints import MaskFiller

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "n"], "additionalProperties": False}


def test_overlapped_and_on_demand_masks_give_the_same_outputs(tiny_paths):
    prompts = [f"record {i}:" for i in range(12)]
    params = [{"json_schema": json.dumps(SCHEMA), "temperature": 1.0, "seed": i, "max_new_tokens": 120,
               "logit_bias": {}} if i % 3 else {"regex": "[a-z]{2,6}( [a-z]{2,6}){0,3}", "seed": i,
                                                "temperature": 1.0, "max_new_tokens": 40} for i in range(12)]
    params[5] = {"temperature": 1.0, "seed": 5, "max_new_tokens": 16}  # an unconstrained row among them
    outputs = {}
    for overlap in (False, True):
        with Engine(str(tiny_paths["tiny-llama"]), dtype="float32", num_threads=1, random_seed=0) as engine:
            assert engine.core.masks.overlap is False  # the CPU default
            engine.core.masks.shutdown()
            engine.core.masks = MaskFiller(overlap=overlap)
            outputs[overlap] = [o["output_ids"] for o in engine.generate(prompts, params)]
    assert outputs[True] == outputs[False]
    assert any(len(ids) > 5 for ids in outputs[True])
