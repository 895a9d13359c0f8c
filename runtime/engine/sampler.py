"""One vectorized sampler for a batch of requests with different sampling parameters.

Per step the engine builds a `SamplingBatch` from the running requests' `SamplingParams` and token histories,
then calls `Sampler.sample(logits, batch, allowed_mask)`. The order of operations is:

    logit_bias -> repetition / frequency / presence penalties -> min_new_tokens ban of EOS and stop ids
    -> grammar allowed-mask -> greedy rows: argmax
                              sampled rows: temperature -> top-k -> top-p -> min-p -> sample

Sampling uses the exponential race (argmax of logits - log(E), E = -log(1 - U) ~ Exp(1)), which draws exactly
from softmax(logits) and lets each row own its noise. Unseeded rows share one batched draw from the sampler's
generator; a row with a `seed` draws its noise from a generator seeded by (seed, tokens generated so far), so it
gives the same tokens alone or in any batch, and after preemption and resume.

Every filter is computed per row from that row's values only, so a row's result never depends on its neighbours
(a filter that does nothing for a row, such as top_p == 1, is masked off for it). top-k and top-p keep every id at
or above a per-row cutoff logit, so ids tied with the cutoff all survive. Penalties are applied sparsely, on the
(row, id) pairs of the token histories only (running counts, `penalties.py`); no [B, V] count tensor is built.

Logprobs are those of the *raw* model distribution, log_softmax(logits) before bias, penalties, masks and
temperature (vLLM's default), computed only for the rows that ask and topk'd only to the largest count asked.
If bias/penalties/ban/mask leave a row with no finite logit, the row falls back to the raw logits restricted to
the grammar mask (the grammar wins over min_new_tokens), or to the raw logits when the mask is empty too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from sprig.kernels.bitmask import mask_logits_
from sprig.kernels.cpu_argmax import argmax_rows
from sprig.runtime.engine.generate_request import SamplingParams
from sprig.runtime.engine.penalties import TokenCounts, TokenHistory

NEG_INF = float("-inf")
_MASK64 = (1 << 64) - 1


@dataclass
class SparseLogits:
    """A sparse [B, V] update: `values[i]` applies at (`rows[i]`, `ids[i]`)."""

    rows: Tensor  # [N] int64
    ids: Tensor  # [N] int64
    values: Tensor  # [N] float32


@dataclass
class PenaltyTensors:
    """The penalties in sparse form, O(history) not O(B x V); built only when some row has a penalty.

    `output_*` hold each distinct (row, id) generated so far with its count (frequency / presence);
    `seen_*` each distinct (row, id) in prompt or output (repetition). Rows without that penalty are absent.
    """

    output_rows: Tensor  # [N] int64
    output_ids: Tensor  # [N] int64
    output_counts: Tensor  # [N] float32
    seen_rows: Tensor  # [M] int64
    seen_ids: Tensor  # [M] int64
    frequency: Tensor  # [B] float32
    presence: Tensor  # [B] float32
    repetition: Tensor  # [B] float32


@dataclass
class SamplingBatch:
    """Per-step sampling tensors for B rows; build it with `SamplingBatch.build`."""

    vocab_size: int
    temperatures: Tensor  # [B] float32; 1.0 on greedy rows so nothing divides by zero
    top_p: Tensor  # [B] float32
    top_k: Tensor  # [B] int64; vocab_size where top-k is off
    min_p: Tensor  # [B] float32
    greedy: Tensor  # [B] bool
    sampled_rows: Tensor  # [S] int64, the non-greedy rows
    seeds: list[int | None]  # per row
    steps: list[int]  # per row: output tokens generated so far (the seeded rows' noise index)
    penalties: PenaltyTensors | None
    logit_bias: SparseLogits | None
    banned: SparseLogits | None  # ids set to -inf (min_new_tokens not reached yet); values unused
    top_logprobs_num: list[int]  # per row; 0 = no alternatives
    logprob_rows: Tensor  # [R] int64, rows that asked for logprobs

    @property
    def batch_size(self) -> int:
        """Number of rows B."""
        return len(self.seeds)

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        prompt_ids: Sequence[Sequence[int]],
        output_ids: Sequence[Sequence[int]],
        vocab_size: int,
        eos_token_ids: Sequence[int] = (),
        return_logprob: Sequence[bool] | None = None,
        top_logprobs_num: Sequence[int] | None = None,
        device: torch.device | str = "cpu",
        histories: Sequence[TokenHistory | None] | None = None,
    ) -> SamplingBatch:
        """Build the step's tensors from validated params and each row's prompt and output token ids so far.

        `histories` (the engine's running counts, one per row, set where the row has penalties) replace the
        rebuild of each row's whole history from `prompt_ids` and `output_ids`."""
        b = len(params)
        if not len(prompt_ids) == len(output_ids) == b:
            raise ValueError("params, prompt_ids and output_ids must have one entry per row")
        greedy = [p.is_greedy for p in params]
        tops = [int(n) for n in (top_logprobs_num or [0] * b)]
        asks = [bool(a) for a in (return_logprob or [False] * b)]
        if any(n < 0 or n > vocab_size for n in tops):
            raise ValueError(f"top_logprobs_num must be in [0, {vocab_size}]")

        def f32(values: Sequence[float]) -> Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device)

        return cls(
            vocab_size=vocab_size,
            temperatures=f32([1.0 if g else p.temperature for p, g in zip(params, greedy, strict=True)]),
            top_p=f32([p.top_p for p in params]),
            top_k=torch.tensor([min(p.top_k, vocab_size) if p.top_k > 0 else vocab_size for p in params],
                               dtype=torch.int64, device=device),
            min_p=f32([p.min_p for p in params]),
            greedy=torch.tensor(greedy, dtype=torch.bool, device=device),
            sampled_rows=torch.tensor([i for i, g in enumerate(greedy) if not g], dtype=torch.int64, device=device),
            seeds=[p.seed for p in params],
            steps=[len(o) for o in output_ids],
            penalties=_build_penalties(params, prompt_ids, output_ids, vocab_size, device, histories),
            logit_bias=_build_bias(params, vocab_size, device),
            banned=_build_ban(params, output_ids, eos_token_ids, vocab_size, device),
            top_logprobs_num=tops,
            logprob_rows=torch.tensor([i for i in range(b) if asks[i] or tops[i] > 0], dtype=torch.int64,
                                      device=device),
        )


@dataclass
class SampleOutput:
    """The sampled ids and, for rows that asked, logprobs of the raw model distribution."""

    next_token_ids: Tensor  # [B] int64
    logprobs: Tensor | None = None  # [B] float32, the chosen token's logprob; NaN on rows that did not ask
    top_logprob_ids: Tensor | None = None  # [B, K] int64, K = max asked; -1 where a row asked fewer
    top_logprobs: Tensor | None = None  # [B, K] float32; NaN where a row asked fewer

    def top_logprobs_of(self, row: int) -> list[tuple[int, float]]:
        """The (id, logprob) alternatives of one row, best first (empty if it asked for none)."""
        if self.top_logprob_ids is None or self.top_logprobs is None:
            return []
        ids = self.top_logprob_ids[row].tolist()
        values = self.top_logprobs[row].tolist()
        return [(i, v) for i, v in zip(ids, values, strict=True) if i >= 0]


class Sampler:
    """Samples the next token of every row of a batch in one vectorized pass (see the module docstring)."""

    def __init__(self, seed: int | None = None, device: torch.device | str = "cpu") -> None:
        """`seed` fixes the shared generator used by unseeded rows (tests); None seeds it from the OS.
        `device` is where logits arrive; the noise and the per-row generators live there."""
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def sample(self, logits: Tensor, batch: SamplingBatch, allowed_mask: Tensor | None = None) -> SampleOutput:
        """Pick one token per row of `logits` [B, V]; `allowed_mask` is a grammar mask, bool [B, V'] with True =
        allowed, or an int32 bitmask [B, ceil(V'/32)] (bit j of word w allows id 32*w + j); ids >= V' are banned.
        """
        if logits.dim() != 2 or tuple(logits.shape) != (batch.batch_size, batch.vocab_size):
            raise ValueError(f"logits must be [{batch.batch_size}, {batch.vocab_size}], got {list(logits.shape)}")
        plain = batch.logit_bias is None and batch.penalties is None and batch.banned is None
        if plain and allowed_mask is None and batch.sampled_rows.numel() == 0:
            next_ids = argmax_rows(logits)  # all greedy, nothing to change: no copy of the logits
        else:
            next_ids = self._process_and_pick(logits, batch, allowed_mask)
        out = SampleOutput(next_token_ids=next_ids)
        if batch.logprob_rows.numel() > 0:
            _fill_logprobs(out, logits, batch)
        return out

    __call__ = sample

    def _process_and_pick(self, logits: Tensor, batch: SamplingBatch, allowed_mask: Tensor | None) -> Tensor:
        """Bias, penalties, bans and the grammar mask on a copy of the logits, then greedy or sampled picks."""
        x = logits.to(torch.float32, copy=True)  # the raw logits stay untouched for logprobs
        if allowed_mask is not None and allowed_mask.dtype == torch.int32:
            process_logits(x, batch, None)
            dead = mask_logits_(x, allowed_mask)  # why: one pass over the bits, never unpacked to bools
            _revive_dead_rows(x, logits, allowed_mask, dead)
        else:
            process_logits(x, batch, None if allowed_mask is None else unpack_allowed_mask(allowed_mask, x.shape[1]))
            if batch.banned is not None or allowed_mask is not None:
                _revive_dead_rows(x, logits, allowed_mask)
        rows = batch.sampled_rows
        if rows.numel() == batch.batch_size:
            return self._sample_rows(x, batch)  # x is already a private copy: no need to gather rows
        next_ids = argmax_rows(x)  # greedy rows; ties go to the lowest id
        if rows.numel() > 0:
            next_ids[rows] = self._sample_rows(x[rows], batch)
        return next_ids

    def _sample_rows(self, x: Tensor, batch: SamplingBatch) -> Tensor:
        """Temperature, top-k, top-p, min-p and the exponential race on the sampled rows `x` [S, V]."""
        rows = batch.sampled_rows
        x.div_(batch.temperatures[rows].unsqueeze(1))
        top_k, top_p = batch.top_k[rows], batch.top_p[rows]
        if bool((top_p < 1).any()):
            apply_top_k_top_p(x, top_k, top_p)
        elif bool((top_k < x.shape[1]).any()):
            apply_top_k(x, top_k)
        min_p = batch.min_p[rows]
        if bool((min_p > 0).any()):
            apply_min_p(x, min_p)
        picked = rows.tolist()
        noise = self._exponentials(x.shape, [batch.seeds[i] for i in picked], [batch.steps[i] for i in picked])
        return argmax_rows(x - noise.log())

    def _exponentials(self, shape: torch.Size, seeds: list[int | None], steps: list[int]) -> Tensor:
        """Exp(1) noise [S, V]: one batched draw for unseeded rows, a private generator per seeded row."""
        uniform = torch.empty(shape, dtype=torch.float32, device=self.device)
        free = [i for i, s in enumerate(seeds) if s is None]
        if len(free) == len(seeds):
            uniform.uniform_(generator=self.generator)
        elif free:
            idx = torch.tensor(free, device=self.device)
            uniform[idx] = torch.rand((len(free), shape[1]), generator=self.generator, device=self.device)
        for i, (seed, step) in enumerate(zip(seeds, steps, strict=True)):
            if seed is not None:  # one loop iteration per seeded row, never per vocabulary entry
                uniform[i].uniform_(generator=self._row_generator(seed, step))
        # -log(1 - U) is Exp(1) (3x cheaper than exponential_ on CPU); clamp: 0 would make log(E) = -inf
        return uniform.neg_().log1p_().neg_().clamp_(min=torch.finfo(torch.float32).tiny)

    def _row_generator(self, seed: int, step: int) -> torch.Generator:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(mix_seed(seed, step))
        return gen


def mix_seed(seed: int, step: int) -> int:
    """A 64-bit generator seed from (request seed, token index), so that nearby pairs get unrelated streams."""
    return _splitmix64(_splitmix64(seed) ^ step)


def _splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def process_logits(x: Tensor, batch: SamplingBatch, allowed: Tensor | None) -> None:
    """In place on float32 `x` [B, V]: logit_bias, penalties, the min_new_tokens ban, then the allowed mask."""
    if batch.logit_bias is not None:
        bias = batch.logit_bias
        x.index_put_((bias.rows, bias.ids), bias.values, accumulate=True)
    if batch.penalties is not None:
        apply_penalties(x, batch.penalties)
    if batch.banned is not None:
        x[batch.banned.rows, batch.banned.ids] = NEG_INF
    if allowed is not None:
        x.masked_fill_(~allowed, NEG_INF)


def apply_penalties(x: Tensor, pen: PenaltyTensors) -> None:
    """Repetition (HF/CTRL: divide positive logits, multiply negative ones) on ids seen in prompt or output,
    then frequency (minus penalty x count) and presence (minus penalty once) on ids generated so far."""
    if pen.seen_ids.numel():
        seen = x[pen.seen_rows, pen.seen_ids]
        scale = pen.repetition[pen.seen_rows]
        x[pen.seen_rows, pen.seen_ids] = torch.where(seen > 0, seen / scale, seen * scale)
    if pen.output_ids.numel():
        rows = pen.output_rows
        x[rows, pen.output_ids] -= pen.frequency[rows] * pen.output_counts + pen.presence[rows]


def apply_top_k(x: Tensor, top_k: Tensor) -> None:
    """Keep each row's `top_k` largest logits (ties at the threshold kept); rows with top_k >= V untouched."""
    vocab = x.shape[1]
    active = top_k < vocab
    k_max = int(top_k[active].max())
    values = x.topk(k_max, dim=-1).values
    kth = values.gather(1, (top_k.clamp(max=k_max) - 1).unsqueeze(1))
    x.masked_fill_((x < kth) & active.unsqueeze(1), NEG_INF)


def apply_top_k_top_p(x: Tensor, top_k: Tensor, top_p: Tensor) -> None:
    """Top-k then top-p (the most likely ids until their mass reaches top_p), from one ascending sort.

    Each row keeps the ids at or above one cutoff logit, so ids tied with the cutoff all stay (as in top-k) and
    no stable sort or scatter back is needed; rows with top_p == 1 and top_k >= V are untouched.
    """
    vocab = x.shape[1]
    sorted_x = x.sort(dim=-1).values
    k_drop = (vocab - top_k.clamp(max=vocab)).unsqueeze(1)  # ascending positions below the k-th largest
    kth = sorted_x.gather(1, k_drop)
    cum = sorted_x.masked_fill(sorted_x < kth, NEG_INF).softmax(dim=-1).cumsum(dim=-1)
    p_drop = ((cum <= (1 - top_p).unsqueeze(1)) & (top_p < 1).unsqueeze(1))[:, :-1].sum(dim=1, keepdim=True)
    cutoff = sorted_x.gather(1, torch.maximum(k_drop, p_drop))  # cum is monotone, so dropped ids are a prefix
    x.masked_fill_(x < cutoff, NEG_INF)


def apply_min_p(x: Tensor, min_p: Tensor) -> None:
    """Drop ids whose probability is below min_p x the row's top probability (in logit space: no softmax)."""
    threshold = x.max(dim=-1, keepdim=True).values + min_p.log().unsqueeze(1)  # log(0) = -inf keeps everything
    x.masked_fill_(x < threshold, NEG_INF)


def unpack_allowed_mask(mask: Tensor, vocab: int) -> Tensor:
    """A bool [B, vocab] allowed-mask from a bool [B, V'] mask or an int32 bitmask [B, W] (ids >= V' banned)."""
    if mask.dtype == torch.int32:
        shifts = torch.arange(32, dtype=torch.int32, device=mask.device)
        mask = ((mask.unsqueeze(-1) >> shifts) & 1).flatten(1).bool()
    elif mask.dtype != torch.bool:
        raise ValueError(f"allowed_mask must be bool or int32, got {mask.dtype}")
    width = mask.shape[1]
    if width >= vocab:
        return mask[:, :vocab]
    return torch.nn.functional.pad(mask, (0, vocab - width), value=False)


def _revive_dead_rows(x: Tensor, raw: Tensor, allowed_mask: Tensor | None, dead: Tensor | None = None) -> None:
    """Rows left with no finite logit (`dead`, found here if not given) fall back to raw logits under the mask
    (or raw logits if it is empty)."""
    dead = x.amax(dim=-1) == NEG_INF if dead is None else dead
    if not bool(dead.any()):
        return
    fallback = raw[dead].to(torch.float32)
    if allowed_mask is not None:
        mask = unpack_allowed_mask(allowed_mask[dead], x.shape[1])  # only the dead rows: rare
        keep = mask.any(dim=-1, keepdim=True)
        fallback.masked_fill_(~mask & keep, NEG_INF)
    x[dead] = fallback


def _fill_logprobs(out: SampleOutput, raw: Tensor, batch: SamplingBatch) -> None:
    """Chosen-token logprob and top-K alternatives from log_softmax(raw logits), only on the asking rows."""
    rows = batch.logprob_rows
    logprobs = torch.log_softmax(raw[rows].to(torch.float32), dim=-1)  # [R, V]: only the rows that asked
    b = batch.batch_size
    out.logprobs = torch.full((b,), float("nan"), dtype=torch.float32, device=raw.device)
    out.logprobs[rows] = logprobs.gather(1, out.next_token_ids[rows].unsqueeze(1)).squeeze(1)
    counts = torch.tensor(batch.top_logprobs_num, device=raw.device)[rows]
    k = int(counts.max()) if counts.numel() else 0
    if k == 0:
        return
    values, ids = logprobs.topk(k, dim=-1)
    short = torch.arange(k, device=raw.device).unsqueeze(0) >= counts.unsqueeze(1)  # beyond what the row asked
    out.top_logprob_ids = torch.full((b, k), -1, dtype=torch.int64, device=raw.device)
    out.top_logprobs = torch.full((b, k), float("nan"), dtype=torch.float32, device=raw.device)
    out.top_logprob_ids[rows] = ids.masked_fill(short, -1)
    out.top_logprobs[rows] = values.masked_fill(short, float("nan"))


def _stacked_counts(counts: Sequence[TokenCounts | None], rows: list[int], vocab: int,
                    device: torch.device | str) -> tuple[Tensor, Tensor, Tensor]:
    """The chosen rows' distinct (row, id) pairs with their counts, as int64/int64/float32 tensors."""
    present = [c for c in counts if c is not None]
    if len(present) != len(rows):
        raise ValueError("every row with a penalty needs its token history")
    if not present:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return empty, empty, torch.empty(0, dtype=torch.float32, device=device)
    ids = torch.from_numpy(np.concatenate([c.ids for c in present])).to(device)
    _check_ids(ids, vocab, "history")
    row_idx = torch.from_numpy(np.repeat(np.asarray(rows, dtype=np.int64), [len(c) for c in present])).to(device)
    values = torch.from_numpy(np.concatenate([c.counts for c in present])).to(device)
    return row_idx, ids, values


def _check_ids(ids: Tensor, vocab_size: int, what: str) -> None:
    # an out-of-range id would index a neighbour's logits on device , so refuse it here
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{what} token ids must be in [0, {vocab_size})")


def _build_penalties(params: Sequence[SamplingParams], prompt_ids: Sequence[Sequence[int]],
                     output_ids: Sequence[Sequence[int]], vocab: int, device: torch.device | str,
                     histories: Sequence[TokenHistory | None] | None = None) -> PenaltyTensors | None:
    if not any(p.has_penalties for p in params):
        return None
    additive = [i for i, p in enumerate(params) if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0]
    repeat = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0]
    if histories is None:
        histories = [TokenHistory(prompt_ids[i], output_ids[i]) if p.has_penalties else None
                     for i, p in enumerate(params)]
    rows = histories
    out_rows, out_ids, counts = _stacked_counts([h.output if (h := rows[i]) else None for i in additive], additive,
                                                vocab, device)
    seen_rows, seen_ids, _ = _stacked_counts([h.seen if (h := rows[i]) else None for i in repeat], repeat, vocab,
                                             device)

    def column(name: str) -> Tensor:
        return torch.tensor([getattr(p, name) for p in params], dtype=torch.float32, device=device)

    return PenaltyTensors(out_rows, out_ids, counts, seen_rows, seen_ids, frequency=column("frequency_penalty"),
                          presence=column("presence_penalty"), repetition=column("repetition_penalty"))


def _build_bias(params: Sequence[SamplingParams], vocab: int, device: torch.device | str) -> SparseLogits | None:
    pairs = [(r, int(t), float(v)) for r, p in enumerate(params) for t, v in p.logit_bias.items()]
    if not pairs:
        return None
    rows, ids, values = zip(*pairs, strict=True)
    sparse = SparseLogits(torch.tensor(rows, device=device), torch.tensor(ids, device=device),
                          torch.tensor(values, dtype=torch.float32, device=device))
    _check_ids(sparse.ids, vocab, "logit_bias")
    return sparse


def _build_ban(params: Sequence[SamplingParams], output_ids: Sequence[Sequence[int]], eos_token_ids: Sequence[int],
               vocab: int, device: torch.device | str) -> SparseLogits | None:
    """Rows that have not reached min_new_tokens may not pick a stop id (nor EOS unless ignore_eos)."""
    pairs: list[tuple[int, int]] = []
    for r, p in enumerate(params):
        if len(output_ids[r]) < p.min_new_tokens:
            banned = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_token_ids))
            pairs.extend((r, int(t)) for t in sorted(banned))
    if not pairs:
        return None
    rows, ids = zip(*pairs, strict=True)
    sparse = SparseLogits(torch.tensor(rows, device=device), torch.tensor(ids, device=device),
                          torch.zeros(len(rows), dtype=torch.float32, device=device))
    _check_ids(sparse.ids, vocab, "stop")
    return sparse
