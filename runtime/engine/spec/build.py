"""The engine's speculator for its config: None without speculation, else the configured proposer."""

from __future__ import annotations

from typing import Any

from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.kv_cache import KVCacheManager
from sprig.runtime.engine.spec.ngram import NgramProposer
from sprig.runtime.engine.spec.speculator import Proposer, Speculator


def build_speculator(config: EngineConfig, kv: KVCacheManager, tokenizer: Any, vocab_size: int,
                     context_length: int) -> Speculator | None:
    """A `Speculator` for `config.speculative_algorithm`, or None when it is unset."""
    algo = config.speculative_algorithm
    if algo is None:
        return None
    proposer: Proposer
    if algo == "ngram":
        proposer = NgramProposer(config.speculative_ngram_min_match_window_size,
                                 config.speculative_ngram_max_match_window_size)
    else:
        raise ValueError(f"speculative_algorithm {algo!r} is not available")
    return Speculator(config, kv, proposer, vocab_size)
