"""bf16 against fp32 on a real model (SmolLM2-135M-Instruct), per path: sprig's bf16 is no worse than transformers'.

Over a fixed English text, the logits of the last positions from transformers fp32 are the reference; transformers
bf16 and sprig bf16 through three paths are held to it: the extend kernel (the positions after a prefix already
in the KV pool), the decode kernel (one token per step, eager) and recorded CPU graphs (the same decode steps
replayed). Figures: max and mean |logit error| and the perplexity of the text's next tokens (see FIGURES).
Also the reported failure: a JSON-repeating chat prompt whose two best first tokens are 0.17 apart in fp32 (a tie
in bf16 logits, which picked the wrong one) must decode as transformers fp32 does.
"""

from __future__ import annotations

import json

import pytest
import torch

from sprig import Engine
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput

TEXT = (
    "The lighthouse stood at the edge of the island for more than a hundred years. Every evening the keeper climbed "
    "the narrow stairs, trimmed the wick and polished the great lens until it shone. Ships passing in the night "
    "saw its beam sweep across the water and knew where the rocks were hidden. When the keeper grew old, his "
    "daughter took over the work. She kept a journal of the weather, the boats that passed and the birds that "
    "rested on the gallery during storms. Years later, when the light was automated, the journal was given to the "
    "town museum, where visitors still read about the winter the sea froze and the summer the whales came close to "
    "shore."
)
PREFIX = 48  # tokens prefilled first; the paths are compared on the positions after it
PATHS = ("extend", "decode", "graphs")


def _figures(logits: torch.Tensor, ref: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    err = (logits.float() - ref).abs()
    nll = torch.nn.functional.cross_entropy(logits.float()[:-1], targets)
    return {"max": err.max().item(), "mean": err.mean().item(), "ppl": nll.exp().item()}


@pytest.fixture(scope="module")
def text_ids(smollm2_folder) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_folder).encode(TEXT)


@pytest.fixture(scope="module")
def transformers_logits(smollm2_folder, text_ids) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=dtype).eval()
        with torch.no_grad():
            out[str(dtype).removeprefix("torch.")] = model(torch.tensor([text_ids])).logits[0, PREFIX:].float()
    return out


def _sprig_logits(model, ids: list[int], path: str) -> torch.Tensor:
    """Logits of positions PREFIX.. of `ids`: PREFIX tokens prefilled, the rest as one extend or as decode steps."""
    pool = KVPool(model.cfg, PoolSize(32, 16), model.dtype)
    runner = ModelRunner(model, pool)
    pages = pool.alloc(-(-len(ids) // 16))
    runner.forward([SeqInput(ids[:PREFIX], 0, pages)])
    if path == "extend":
        return runner.forward([SeqInput(ids[PREFIX:], PREFIX, pages, all_logits=True)]).logits
    if path == "graphs":
        runner.enable_decode_graphs(max_context=len(ids) + 16, max_batch=1, use_graphs=True)
    rows = [runner.forward([SeqInput([ids[t]], t, pages)]).logits.clone() for t in range(PREFIX, len(ids))]
    if path == "graphs":
        graphs = runner.graph_runner
        assert graphs is not None and graphs.cpu_graphs and graphs.capture_error is None
    return torch.cat(rows)


@pytest.fixture(scope="module")
def figures(smollm2_folder, text_ids, transformers_logits) -> dict[str, dict[str, float]]:
    ref = transformers_logits["float32"]
    targets = torch.tensor(text_ids[PREFIX + 1 :])
    out = {f"transformers {k}": _figures(v, ref, targets) for k, v in transformers_logits.items()}
    model = load_model(smollm2_folder, "bfloat16")
    for path in PATHS:
        out[f"sprig bfloat16 {path}"] = _figures(_sprig_logits(model, text_ids, path), ref, targets)
    print("\n" + "\n".join(f"{k:28s} max {v['max']:.3f} mean {v['mean']:.4f} ppl {v['ppl']:.3f}"
                           for k, v in out.items()))
    return out


def test_the_folder_loads_with_transformers_5_config(smollm2_folder):
    """sprig's config loader takes what transformers 5 writes (`rope_parameters`), and the head is tied."""
    model = load_model(smollm2_folder, "bfloat16")
    assert model.cfg.rope.theta == 100000.0 and model.cfg.tie_word_embeddings
    assert model.graph_blocker is None  # a tied head runs sprig's kernel: decode steps replay from CPU graphs


@pytest.mark.parametrize("path", PATHS)
def test_sprig_bf16_is_no_worse_than_transformers_bf16(figures, path):
    """The issue's criterion, per path: against fp32 logits, sprig bf16's max and mean |logit error| are at most
    transformers bf16's over the same positions. Measured here (AVX512_BF16 vector linears, sprig's C attention;
    122 positions x 49,152 logits):

        transformers bf16      max 0.535  mean 0.1042  ppl 27.150 (fp32: 27.105)
        sprig bf16 extend      max 0.361  mean 0.0532  ppl 27.051
        sprig bf16 decode      max 0.396  mean 0.0506  ppl 27.044
        sprig bf16 graphs      the same bits as decode

    sprig rounds less than transformers: the residual stream stays fp32, RMSNorm scales by its weight and RoPE
    rotates in fp32 with one rounding each, the LM head writes fp32 logits. Before those (bf16 residual, two
    roundings in the norm, bf16 cos/sin) it was max 0.727 / 0.620, mean 0.092 / 0.104 (extend / decode), and the
    max of 122 positions moved by +-0.1 with each bf16 product summed in another order. The perplexity of these
    122 tokens drifts by rounding noise of either sign: held to 1.5x transformers' drift plus 1 %."""
    ours, theirs, exact = figures[f"sprig bfloat16 {path}"], figures["transformers bfloat16"], figures[
        "transformers float32"]
    assert ours["max"] <= theirs["max"] and ours["mean"] <= theirs["mean"], (ours, theirs)
    assert abs(ours["ppl"] - exact["ppl"]) <= 1.5 * abs(theirs["ppl"] - exact["ppl"]) + 0.01 * exact["ppl"]
    assert figures["sprig bfloat16 decode"] == figures["sprig bfloat16 graphs"]  # replay: the same kernels, bits


def test_the_json_prompt_decodes_as_transformers_fp32(smollm2_folder):
    """The reported failure's shape: greedy bf16 at a step whose fp32 top two are 0.17 apart ('{"' 32.35, '{' 32.19)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    names = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Niaj",
             "Olivia", "Peggy"]
    users = [{"id": i, "name": n, "email": f"{n.lower()}@example.com", "role": "admin" if i % 3 == 0 else "user",
              "active": i % 2 == 0} for i, n in enumerate(names)]
    content = "Please repeat this JSON back to me verbatim.\n" + json.dumps({"users": users})
    ids = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                        tokenize=True)
    ids = ids if isinstance(ids, list) else ids["input_ids"]
    hf = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0, len(ids):].tolist()
    with Engine(str(smollm2_folder), dtype="bfloat16", random_seed=0) as engine:
        got = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 8, "temperature": 0})["output_ids"]
    assert got == expected, (tokenizer.decode(got), tokenizer.decode(expected))
