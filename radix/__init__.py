"""sprig.radix: the prefix tree that indexes cached KV slots by token ids."""

from sprig.radix.radix_cache import MatchResult, RadixCache, TreeNode

__all__ = ["MatchResult", "RadixCache", "TreeNode"]
