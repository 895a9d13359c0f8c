"""The engine's speculator for its config: None without speculation, else the configured proposer."""

from __future__ import annotations

from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.kv_cache import KVCacheManager
from sprig.runtime.engine.spec.draft_model import DraftModelProposer
from sprig.runtime.engine.spec.ngram import NgramProposer
from sprig.runtime.engine.spec.speculator import Proposer, Speculator
from sprig.runtime.model.tokenizer import Tokenizer


def build_speculator(config: EngineConfig, kv: KVCacheManager, tokenizer: Tokenizer,
                     vocab_size: int) -> Speculator | None:
    """A `Speculator` for `config.speculative_algorithm`, or None when it is unset."""
    algo = config.speculative_algorithm
    if algo is None:
        return None
    proposer: Proposer
    if algo == "ngram":
        proposer = NgramProposer(config.speculative_ngram_min_match_window_size,
                                 config.speculative_ngram_max_match_window_size)
    else:
        proposer = DraftModelProposer(config, tokenizer, vocab_size, kv.total_tokens)
    return Speculator(config, kv, proposer, vocab_size)
