"""Compilation: the compiler the engine talks to, its killable worker processes and its LRU cache."""
