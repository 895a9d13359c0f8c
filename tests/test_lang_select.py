"""`select` on a checkpoint whose weights make one choice certain: it must pick that choice, by every method.

The planted model is a bigram chain: attention and MLP outputs are zeroed, so the final hidden state depends on
the current token only. The prompt's last token and each target token get their own one-hot embedding
direction, every other token shares one more; the LM head maps each chain token's direction to the next
target token with logit 40, so after the prompt the target choice is certain and every other choice is
nearly impossible, while without the prompt the target's first token is no likelier than any other.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import sprig
from sprig import Engine
from sprig.lang import SelectMethod

CHOICES = (" Paris", " London", " Rome")
TARGET = " London"
PROMPT = "The capital of England is"


@pytest.fixture(scope="module")
def planted(tiny_paths, tmp_path_factory):
    src = tiny_paths["tiny-llama"]
    dst = tmp_path_factory.mktemp("planted") / "ckpt"
    shutil.copytree(src, dst)
    from sprig.runtime.model.tokenizer import Tokenizer

    tok = Tokenizer(dst)
    base = tok.encode(PROMPT)
    full = tok.encode(PROMPT + TARGET)
    assert full[: len(base)] == base  # no seam merge: the target's tokens are the tail
    target_ids = full[len(base):]
    weights = load_file(str(dst / "model.safetensors"))
    for name, value in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = np.zeros_like(value)
        elif name.endswith("norm.weight"):
            weights[name] = np.ones_like(value)
    chain = [base[-1], *target_ids]
    assert len(set(chain)) == len(chain)
    emb = np.zeros_like(weights["model.embed_tokens.weight"])
    emb[:, 0] = 1.0  # the shared direction of every token outside the chain
    head = np.zeros_like(weights["lm_head.weight"])
    scale = 40.0 / np.sqrt(emb.shape[1])  # a one-hot row RMS-normalizes to sqrt(hidden) in its direction
    for dim, (ctx, nxt) in enumerate(zip(chain, chain[1:], strict=False), start=1):
        emb[ctx] = 0.0
        emb[ctx, dim] = 1.0
        head[nxt, dim] = scale
    weights["model.embed_tokens.weight"] = emb
    weights["lm_head.weight"] = head
    save_file(weights, str(dst / "model.safetensors"))
    with Engine(str(dst), dtype="float32", num_threads=1, max_total_tokens=1024) as e:
        yield e


@sprig.function
def capital(s, method):
    s += PROMPT + sprig.select("city", list(CHOICES), method=method)


@pytest.mark.parametrize("method", list(SelectMethod))
def test_select_picks_the_planted_choice(planted, method):
    st = capital.run(method=method, backend=planted)
    assert st["city"] == TARGET
    meta = st.get_meta_info("city")
    assert meta["index"] == CHOICES.index(TARGET) and len(meta["scores"]) == len(CHOICES)
    if method is SelectMethod.TOKEN_LENGTH_NORMALIZED:
        best = meta["scores"][meta["index"]]
        assert all(best > s + 10 for i, s in enumerate(meta["scores"]) if i != meta["index"])


def test_select_inside_a_chat_turn_picks_the_planted_choice(planted):
    @sprig.function
    def prog(s):
        s += sprig.user("Which city?")
        with s.assistant():
            s += PROMPT + sprig.select("city", list(CHOICES))

    st = prog.run(backend=planted)
    assert st["city"] == TARGET and st.messages()[-1]["content"] == PROMPT + TARGET
