"""Errors raised by sprig programs: one line of text each, `ValueError` subclasses for bad arguments."""

from __future__ import annotations


class LangError(Exception):
    """Base class of every error the DSL raises on its own."""


class InvalidArgumentError(LangError, ValueError):
    """A primitive or a run call got an invalid argument; `param` names it."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ProgramStateError(LangError):
    """An operation does not fit the state (a role closed twice, a role inside a role, ...)."""


class BackendError(LangError):
    """A backend could not serve a call (HTTP failure, server error, malformed response)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class UnsupportedError(BackendError):
    """The backend cannot do what the program asks (e.g. `select` on a server without prompt logprobs)."""


class ParseError(LangError, ValueError):
    """A generated value could not be converted to the requested `dtype`."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
