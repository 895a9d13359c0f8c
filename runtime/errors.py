"""Errors users see, each with one clear line of text."""

from __future__ import annotations


class SprigError(Exception):
    """Base class for errors sprig reports to users without a traceback."""


USER_ERRORS = (SprigError, ValueError, OSError)  # the user's to fix (options, files, device): one line


def describe(error: BaseException) -> str:
    """One line for the user: a user error's message, else the exception's type and message (a bug)."""
    text = str(error) if isinstance(error, USER_ERRORS) else f"{type(error).__name__}: {error}"
    return " ".join(text.split())


class CheckpointError(SprigError):
    """The checkpoint folder cannot be loaded (missing files, unsupported architecture, bad tensors)."""


class RequestError(ValueError):
    """A request is invalid; `param` names the offending field, `code` is a stable machine-readable string."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
