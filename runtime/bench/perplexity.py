"""Perplexity of a token sequence with a sliding window: through sprig's prompt logprobs and through transformers.

Each window is `window` tokens long and starts `stride` tokens after the previous one; it scores only the tokens the
previous window did not (all but the first in the first window), so every token after the first is scored once,
with at least `window - stride` tokens of context except near the start (the usual Hugging Face recipe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Window:
    """Tokens [start, end) of the text; the window scores positions [start + score_from, end)."""

    start: int
    end: int
    score_from: int  # first scored position, relative to start (>= 1: the first token has no prediction)


@dataclass(frozen=True)
class Perplexity:
    """Summed negative log-likelihood over `tokens` scored tokens."""

    nll: float
    tokens: int

    @property
    def value(self) -> float:
        return math.exp(self.nll / self.tokens)


def sliding_windows(num_tokens: int, window: int, stride: int) -> list[Window]:
    """The windows that score every token from the second one once (see the module docstring)."""
    if not 0 < stride <= window:
        raise ValueError(f"stride must be in (0, window]; got stride {stride}, window {window}")
    if num_tokens < 2:
        raise ValueError("perplexity needs at least two tokens")
    out: list[Window] = []
    scored_to = 1
    start = 0
    while scored_to < num_tokens:
        end = min(start + window, num_tokens)
        out.append(Window(start, end, max(scored_to - start, 1)))
        scored_to = end
        start += stride
    return out


def sprig_perplexity(engine: Any, ids: list[int], windows: list[Window], batch: int = 4) -> Perplexity:
    """Perplexity from `engine`'s prompt logprobs (max_new_tokens 0), `batch` windows per generate call."""
    nll, count = 0.0, 0
    for group in _same_score_from(windows, batch):
        results = engine.generate(input_ids=[ids[w.start : w.end] for w in group],
                                  sampling_params={"max_new_tokens": 0, "temperature": 0},
                                  return_logprob=True, logprob_start_len=group[0].score_from)
        for w, result in zip(group, results, strict=True):
            pairs = result["meta_info"]["input_token_logprobs"]
            expected = ids[w.start + w.score_from : w.end]
            if [tok for _, tok in pairs] != expected:
                raise RuntimeError(f"prompt logprobs of window {w} do not cover positions {w.score_from}..")
            nll -= sum(lp for lp, _ in pairs)
            count += len(pairs)
    return Perplexity(nll, count)


def _same_score_from(windows: list[Window], batch: int) -> list[list[Window]]:
    # one generate call takes one logprob_start_len
    groups: list[list[Window]] = []
    for w in windows:
        if groups and len(groups[-1]) < batch and groups[-1][0].score_from == w.score_from:
            groups[-1].append(w)
        else:
            groups.append([w])
    return groups


def transformers_perplexity(model: Any, ids: list[int], windows: list[Window]) -> Perplexity:
    """Perplexity from a transformers causal LM (fp32 log-softmax of its logits)."""
    nll, count = 0.0, 0
    for w in windows:
        x = torch.tensor([ids[w.start : w.end]])
        with torch.no_grad():
            logits = model(x).logits[0].float()
        logprobs = torch.log_softmax(logits[w.score_from - 1 : -1], dim=-1)
        targets = x[0, w.score_from :]
        nll -= float(logprobs.gather(1, targets[:, None]).sum())
        count += len(targets)
    return Perplexity(nll, count)


def dequantized_folder(gguf_path: Path, folder: Path) -> Path:
    """A Hugging Face folder (fp32 safetensors, config, tokenizer) of the GGUF file's weights dequantized by
    transformers, written once: the full-precision start for --quantization and the KV dtypes."""
    if (folder / "config.json").is_file():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = folder.with_name(folder.name + ".partial")
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    vars(model)["hf_quantizer"] = None  # why: transformers refuses to save a GGUF-loaded model; its weights are plain fp32
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name).save_pretrained(tmp)
    tmp.rename(folder)  # config.json appears only with the whole folder
    return folder
