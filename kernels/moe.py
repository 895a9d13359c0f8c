"""Mixture-of-experts feed-forward (torch reference): route each token to its top-k experts, run each active expert's
SwiGLU MLP over the tokens routed to it, and sum the outputs weighted by the routing weights."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from sprig.kernels.activation import silu_and_mul


def route(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float32 [T, k], expert ids int64 [T, k]): softmax over the experts in fp32, the k largest
    probabilities (ties to the lower id), rescaled to sum to 1 when `renormalize` (Mixtral, `norm_topk_prob`)."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def group_by_expert(ids: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, list[int]]:
    """(the flat [T * k] routing slots sorted by expert, stably; how many slots each expert has)."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    return order, torch.bincount(flat, minlength=num_experts).tolist()


def moe_loop(x: torch.Tensor, router_logits: torch.Tensor, top_k: int, renormalize: bool, num_experts: int,
             expert: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The MoE output [T, H] in x's dtype: `expert(e, rows)` (expert e's MLP over the rows routed to it) once per
    active expert, the outputs weighted by the routing weights and summed in fp32, rounded once."""
    weights, ids = route(router_logits, top_k, renormalize)
    order, counts = group_by_expert(ids, num_experts)
    flat_weights = weights.reshape(-1)
    out: torch.Tensor | None = None
    start = 0
    for e, count in enumerate(counts):
        if count == 0:
            continue
        slots = order[start : start + count]
        start += count
        tokens = slots // top_k
        y = expert(e, x[tokens]).float() * flat_weights[slots, None]
        out = torch.zeros(x.shape[0], y.shape[1], dtype=torch.float32, device=x.device) if out is None else out
        out.index_add_(0, tokens, y)
    return torch.zeros_like(x) if out is None else out.to(x.dtype)


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, router_logits: torch.Tensor, top_k: int,
              renormalize: bool) -> torch.Tensor:
    """The MoE output [T, H] in x's dtype for x [T, H], expert weights w13 [E, 2I, H] (gate rows then up rows) and
    w2 [E, H, I], router logits [T, E]: per active expert one gate_up product, SiLU-and-mul, one down product over
    the tokens routed to it; the weighted outputs are summed in fp32 and rounded once."""
    return moe_loop(x, router_logits, top_k, renormalize, w13.shape[0],
                    lambda e, rows: F.linear(silu_and_mul(F.linear(rows, w13[e])), w2[e]))
