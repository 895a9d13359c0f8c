"""Errors raised while compiling a constraint: one type, a stable code, and where it went wrong."""

from __future__ import annotations

from enum import Enum

MAX_MESSAGE_CHARS = 300  # why: messages travel to HTTP clients and must stay bounded


class GrammarErrorCode(str, Enum):
    """Stable error codes, mirrored in the server's OpenAI-shaped error body."""

    INVALID_SCHEMA = "invalid_schema"
    UNSUPPORTED_KEYWORD = "unsupported_keyword"
    INVALID_REGEX = "invalid_regex"
    INVALID_CHOICES = "invalid_choices"
    GRAMMAR_TOO_COMPLEX = "grammar_too_complex"
    INVALID_GRAMMAR = "invalid_grammar"


class GrammarError(ValueError):
    """A constraint that cannot be compiled; a client error (HTTP 400).

    ``code`` is a stable string from `GrammarErrorCode`; ``param`` names the request field (for example
    ``"json_schema"``); ``pointer`` is the JSON pointer of the offending schema location, when there is one.
    """

    def __init__(self, message: str, code: GrammarErrorCode = GrammarErrorCode.INVALID_SCHEMA,
                 param: str | None = None, pointer: str | None = None) -> None:
        message = _bounded(message)
        super().__init__(message)
        self.message = message
        self.code = GrammarErrorCode(code).value
        self.param = param
        self.pointer = pointer

    def __reduce__(self):  # why: errors cross the compile worker's process boundary
        return (_rebuild, (type(self), self.message, self.code, self.param, self.pointer))

    def with_param(self, param: str) -> GrammarError:
        """Return this error with ``param`` set (the compiler knows the request field, the parsers do not)."""
        self.param = param
        return self


class GrammarTooComplex(GrammarError):
    """The constraint is valid but over a time, state-count, size or memory budget (HTTP 400/422)."""

    def __init__(self, message: str, code: GrammarErrorCode = GrammarErrorCode.GRAMMAR_TOO_COMPLEX,
                 param: str | None = None, pointer: str | None = None) -> None:
        super().__init__(message, code, param, pointer)


def unsupported(keyword: str, pointer: str, why: str = "") -> GrammarError:
    """The error for a keyword sprig cannot enforce: it names the keyword and where it is."""
    detail = f": {why}" if why else ""
    return GrammarError(f"unsupported keyword '{keyword}' at '{pointer or '/'}'{detail}",
                        GrammarErrorCode.UNSUPPORTED_KEYWORD, pointer=pointer or "/")


def invalid_schema(message: str, pointer: str) -> GrammarError:
    return GrammarError(f"invalid schema at '{pointer or '/'}': {message}", GrammarErrorCode.INVALID_SCHEMA,
                        pointer=pointer or "/")


def too_complex(message: str, pointer: str | None = None) -> GrammarTooComplex:
    return GrammarTooComplex(f"grammar too complex: {message}", pointer=pointer)


def _bounded(message: str) -> str:
    message = str(message)
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 3] + "..."


def _rebuild(cls: type[GrammarError], message: str, code: str, param: str | None,
             pointer: str | None) -> GrammarError:
    err = cls.__new__(cls)
    ValueError.__init__(err, message)
    err.message, err.code, err.param, err.pointer = message, code, param, pointer
    return err
