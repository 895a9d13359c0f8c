"""Prompt logprobs: how likely each prompt token was given the ones before it, from a step's all-rows logits."""

from __future__ import annotations

import torch
from torch import Tensor

from sprig.runtime.engine.request import Request


def record_prompt_logprobs(req: Request, logits: Tensor, first_pos: int) -> None:
    """Append to `req.input_logprobs` the logprob of each prompt token from logprob_start_len, given the tokens
    before it; `logits` are the rows of a step whose first new token sits at `first_pos`."""
    lp = req.logprobs
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    k = lp.top_logprobs_num
    top_v, top_i = (logprobs.topk(k, dim=-1) if k > 0 else (None, None))
    if lp.logprob_start_len == 0 and first_pos == 0 and not req.input_logprobs:
        req.input_logprobs.append((None, req.prompt_ids[0], []))
    for r in range(logits.shape[0]):
        pos = first_pos + r + 1  # the prompt position this row predicts
        if pos < lp.logprob_start_len or pos >= len(req.prompt_ids):
            continue
        tok = req.prompt_ids[pos]
        top = list(zip(top_v[r].tolist(), top_i[r].tolist(), strict=True)) if top_v is not None and \
            top_i is not None else []
        req.input_logprobs.append((float(logprobs[r, tok]), tok, top))
