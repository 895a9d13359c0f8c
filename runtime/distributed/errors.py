"""The errors of a multi-process engine: one base, so callers can catch a failed rank whatever the split."""

from __future__ import annotations

from sprig.runtime.errors import SprigError


class ParallelError(SprigError, RuntimeError):
    """A rank of a multi-process (tensor- or pipeline-parallel) engine failed to start, died, or a message or
    collective between ranks failed."""


class TensorParallelError(ParallelError):
    """A tensor-parallel rank failed to start, died, or a collective between ranks failed."""


class PipelineParallelError(ParallelError):
    """A rank of a pipeline-parallel engine (any stage) failed to start, died, or a message between stages failed."""
