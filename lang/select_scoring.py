"""How `select` scores its choices.

Each choice is scored by the logprobs of its tokens when it follows the prompt, computed in one prefill over
`prompt + choice` with prompt logprobs turned on from the boundary (the prompt's KV before it is reused).

Tokenization at the boundary: text is tokenized as a whole, so `prompt + choice` may tokenize the end of the
prompt differently from the prompt alone (BPE can merge across the seam). A choice's tokens are therefore the
tokens of `prompt + choice` from the first one that differs from the prompt's own tokenization; they cover the
whole choice and, at a seam merge, the last characters of the prompt too, which every choice shares. Looking
back for the seam is bounded by `BOUNDARY_LOOKBACK` tokens.

Methods (`SelectMethod`):
- token_length_normalized (default): the mean logprob of the choice's tokens; the highest wins.
- greedy_token: what greedy decoding restricted to the choices would pick: the choice whose first token has
  the highest logprob, ties (choices sharing that token) broken by the next token, and so on; a choice with no
  token left at a position counts its own mean there. Reported scores are the first token's logprob.
- unconditional_likelihood_normalized: the choice's summed logprob after the prompt minus its summed logprob
  after only the prompt's first token (BOS, or the start of the first chat turn): how much the prompt raises
  the choice above its prior, which corrects for choices that are likely anywhere.
Ties go to the earlier choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sprig.lang.backends.base import ChoiceLogprobs
from sprig.lang.ir import SelectMethod

BOUNDARY_LOOKBACK = 8  # tokens before the end of the prompt where a seam merge may start
TIE_TOLERANCE = 1e-4  # equal tokens at equal positions score equal up to batching noise


@dataclass(frozen=True)
class SelectDecision:
    """The chosen index and every choice's score under the method."""

    index: int
    scores: tuple[float, ...]
    normalized: tuple[float, ...]  # mean token logprob of each choice, whatever the method


def seam(prefix_window: Sequence[int], choice_window: Sequence[int]) -> int:
    """Where a choice's tokens start inside a window: the first token that differs from the prompt's."""
    n = 0
    for a, b in zip(prefix_window, choice_window, strict=False):
        if a != b:
            break
        n += 1
    return min(n, len(choice_window) - 1)  # a choice always owns at least one token


def decide(method: SelectMethod, items: Sequence[ChoiceLogprobs]) -> SelectDecision:
    """Apply `method` to the choices' token logprobs."""
    if not items or any(not it.logprobs for it in items):
        raise ValueError("every choice needs at least one scored token")
    means = tuple(sum(it.logprobs) / len(it.logprobs) for it in items)
    if method is SelectMethod.TOKEN_LENGTH_NORMALIZED:
        return SelectDecision(_argmax(means), means, means)
    if method is SelectMethod.GREEDY_TOKEN:
        return SelectDecision(_greedy(items, means), tuple(it.logprobs[0] for it in items), means)
    if any(it.unconditional is None for it in items):
        raise ValueError("unconditional logprobs are missing")
    pmi = tuple(sum(it.logprobs) - sum(it.unconditional or ()) for it in items)
    return SelectDecision(_argmax(pmi), pmi, means)


def _argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def _greedy(items: Sequence[ChoiceLogprobs], means: Sequence[float]) -> int:
    alive = list(range(len(items)))
    depth = max(len(it.logprobs) for it in items)
    for pos in range(depth):
        if len(alive) == 1:
            break
        at = {i: items[i].logprobs[pos] if pos < len(items[i].logprobs) else means[i] for i in alive}
        top = max(at.values())
        alive = [i for i in alive if at[i] >= top - TIE_TOLERANCE]
    return alive[0]
