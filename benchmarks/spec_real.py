"""Speculative decoding (n-gram) on the real SmolLM2-135M (native Q4_1, fp32 activations), greedy, 96 new tokens:
a copy-heavy prompt (reformat a JSON record given in the prompt) and a plain chat prompt, with speculation off and
on. Prints tokens, tokens/s and the mean accepted length (`spec_accept_length`: tokens added per verify forward).

    python benchmarks/spec_real.py
"""

from __future__ import annotations

import json
import time

import torch
from quality import smollm2_gguf

from sprig import Engine

RECORD = {"id": 1042, "name": "Ada Lovelace", "email": "ada@example.org", "roles": ["admin", "editor"],
          "address": {"street": "12 St James's Square", "city": "London", "postcode": "SW1Y 4JH"}, "active": True}
COPY = [{"role": "user", "content": "Reformat this JSON with 4-space indentation and keys in the same order:\n"
         + json.dumps(RECORD)}]
CHAT = [{"role": "user", "content": "Explain in a few sentences why the sky is blue."}]


def main() -> None:
    torch.set_num_threads(1)
    g = smollm2_gguf()
    for spec in (None, "ngram"):
        opts = {"speculative_algorithm": spec} if spec else {}
        with Engine(str(g), dtype="float32", num_threads=1, max_total_tokens=4096, **opts) as e:
            tok = e.core.tokenizer
            for name, msgs in (("copy", COPY), ("chat", CHAT)):
                ids = tok.encode(tok.apply_chat_template(msgs), add_special_tokens=False)
                t = time.perf_counter()
                out = e.generate(input_ids=ids, sampling_params={"max_new_tokens": 96, "temperature": 0})
                dt = time.perf_counter() - t
                m = out["meta_info"]
                print(spec, name, len(out["output_ids"]), f"{len(out['output_ids'])/dt:.1f} tok/s",
                      m.get("spec_accept_length"), m.get("spec_verify_ct"), flush=True)


if __name__ == "__main__":
    main()
