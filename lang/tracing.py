"""Finding a program's constant prefix before a batch runs.

The program body is run with a few of the batch's real argument sets on a tracing state that records text
and roles and stops at the first model call (or anything that needs one: a read, a fork). The longest common
prefix of those texts is what every program of the batch starts with, so it can be cached once up front.
Side effects before a program's first model call therefore happen once more per traced sample; pass
`cache_prefix=False` to `run_batch` to skip tracing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sprig.lang.chat import ChatFormatter
from sprig.lang.document import Document
from sprig.lang.ir import Gen, Role, RoleBegin, RoleEnd, Select, Text, flatten, to_node

logger = logging.getLogger(__name__)
TRACE_SAMPLES = 4  # argument sets traced; more only confirms the same prefix


class StopTrace(Exception):
    """The traced program reached something that needs the model."""


class TraceState:
    """A stand-in `s` that records text until the first model call."""

    def __init__(self, formatter: ChatFormatter) -> None:
        self.doc = Document()
        self._formatter = formatter

    def __iadd__(self, other: Any) -> TraceState:
        for node in flatten(to_node(other)):
            if isinstance(node, Text):
                self.doc.append(node.text)
            elif isinstance(node, RoleBegin):
                self.doc.begin_role(node.role, self._formatter)
            elif isinstance(node, RoleEnd):
                self.doc.end_role(node.role)
            elif isinstance(node, Gen | Select):
                raise StopTrace
        return self

    @contextlib.contextmanager
    def _role(self, role: Role) -> Iterator[None]:
        self += RoleBegin(role)
        yield
        self += RoleEnd(role)

    def system(self) -> contextlib.AbstractContextManager[None]:
        return self._role(Role.SYSTEM)

    def user(self) -> contextlib.AbstractContextManager[None]:
        return self._role(Role.USER)

    def assistant(self) -> contextlib.AbstractContextManager[None]:
        return self._role(Role.ASSISTANT)

    def __getattr__(self, name: str) -> Any:
        raise StopTrace  # reads, forks, anything else: the prefix ends here

    def __getitem__(self, name: str) -> Any:
        raise StopTrace


def trace_text(fn: Callable[..., Any], kwargs: dict[str, Any], formatter: ChatFormatter) -> str | None:
    """The text `fn` builds before its first model call; None when the trace fails."""
    state = TraceState(formatter)
    try:
        fn(state, **kwargs)
    except StopTrace:
        pass
    except Exception as e:  # noqa: BLE001 - tracing is an optimisation: never fail the batch over it
        logger.debug("tracing the program failed: %s", e)
        return None
    return state.doc.text


def constant_prefix(fn: Callable[..., Any], batch: Sequence[dict[str, Any]], formatter: ChatFormatter) -> str:
    """The text every traced program starts with ('' when the batch has fewer than two programs)."""
    if len(batch) < 2:
        return ""
    texts = [trace_text(fn, kwargs, formatter) for kwargs in batch[:TRACE_SAMPLES]]
    if any(t is None for t in texts):
        return ""
    return os.path.commonprefix([t for t in texts if t is not None])
