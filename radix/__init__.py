"""sprig.radix: the prefix tree that indexes cached KV slots by token ids, on one tier or over a host tier."""

from sprig.radix.hiradix_cache import HiRadixCache, HostStore
from sprig.radix.radix_cache import MatchResult, RadixCache, Residency, TreeNode

__all__ = ["HiRadixCache", "HostStore", "MatchResult", "RadixCache", "Residency", "TreeNode"]
