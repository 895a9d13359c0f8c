"""`ProgramState` (the `s` of a program) and `ForkGroup`.

Appending to a state queues the operation and returns at once; a worker thread per state runs the queue in
order, so branches of a fork run concurrently even when a program appends to them in a plain loop. Reading
(`s["x"]`, `s.text()`) waits for the queue. The first failing operation stores its error on the state and
drops the rest of the queue; reading a missing variable then raises that error.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from sprig.lang import interpreter
from sprig.lang.document import Document
from sprig.lang.errors import InvalidArgumentError
from sprig.lang.interpreter import RunConfig
from sprig.lang.ir import Gen, Node, Role, RoleBegin, RoleEnd, Select, Text, flatten, to_node


@dataclass(frozen=True)
class StreamEvent:
    """Text appended to a state: by the variable `var` (None: program or template text); `end` closes a var."""

    var: str | None
    delta: str
    end: bool = False


class ProgramState:
    """The state of a running program: its text, messages, variables and meta info."""

    def __init__(self, config: RunConfig, doc: Document | None = None, variables: dict[str, Any] | None = None,
                 path: tuple[str, ...] = ("root",), gate: threading.Event | None = None) -> None:
        self.config = config
        self.path = path
        self.ret_value: Any = None
        self._doc = doc or Document()
        self._vars: dict[str, Any] = dict(variables or {})
        self._meta: dict[str, dict[str, Any]] = {}
        self._queue: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._error: BaseException | None = None
        self._events: list[StreamEvent] = []
        self._finished = False
        self._children: list[ProgramState] = []
        self._calls = 0  # model calls queued so far: with the path, it seeds each call reproducibly
        self._forks = 0
        # A branch starts when its parent reaches the fork point (the gate opens with the parent's text).
        self._gate = gate or _OPEN

    # --- appending -----------------------------------------------------------------------------------
    def __iadd__(self, other: Any) -> ProgramState:
        for node in flatten(to_node(other)):
            self._enqueue(self._op_for(node))
        return self

    def _op_for(self, node: Node) -> Callable[[], None]:
        if isinstance(node, Text):
            return lambda: self._emit(None, node.text)
        if isinstance(node, RoleBegin):
            return lambda: self._emit_template(lambda: self._doc.begin_role(node.role, self.config.backend
                                                                            .chat_formatter))
        if isinstance(node, RoleEnd):
            return lambda: self._emit_template(lambda: self._doc.end_role(node.role))
        index = self._calls
        self._calls += 1
        if isinstance(node, Gen):
            return lambda: interpreter.run_gen(self, node, index)
        if isinstance(node, Select):
            return lambda: interpreter.run_select(self, node)
        raise TypeError(f"unknown node {type(node).__name__}")

    @contextlib.contextmanager
    def _role(self, role: Role) -> Iterator[None]:
        self += RoleBegin(role)
        yield
        self += RoleEnd(role)

    def system(self) -> contextlib.AbstractContextManager[None]:
        """`with s.system(): ...` writes one system message."""
        return self._role(Role.SYSTEM)

    def user(self) -> contextlib.AbstractContextManager[None]:
        """`with s.user(): ...` writes one user message."""
        return self._role(Role.USER)

    def assistant(self) -> contextlib.AbstractContextManager[None]:
        """`with s.assistant(): ...` writes one assistant message."""
        return self._role(Role.ASSISTANT)

    def set_var(self, name: str, value: Any) -> None:
        """Store a value as `s[name]` (in program order, like a gen)."""
        self._enqueue(lambda: self._vars.__setitem__(name, value))

    def __setitem__(self, name: str, value: Any) -> None:
        self.set_var(name, value)

    # --- reading -------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        self.sync()
        if name in self._vars:
            return self._vars[name]
        if self._error is not None:
            raise self._error
        raise KeyError(f"the program has no variable {name!r} (known: {', '.join(sorted(self._vars)) or 'none'})")

    def __contains__(self, name: str) -> bool:
        self.sync()
        return name in self._vars

    def get_var(self, name: str, default: Any = None) -> Any:
        """`s[name]`, or `default` when the program has not set it."""
        self.sync()
        return self._vars.get(name, default)

    def variables(self) -> dict[str, Any]:
        """All variables set so far."""
        self.sync()
        return dict(self._vars)

    def text(self) -> str:
        """The whole text so far (prompt, role template text and generated text)."""
        self.sync()
        return self._doc.text

    def messages(self) -> list[dict[str, str]]:
        """The closed chat messages so far, as {"role", "content"} dicts."""
        self.sync()
        return [dict(m) for m in self._doc.messages]

    def get_meta_info(self, name: str) -> dict[str, Any]:
        """Meta info of the call that set `name`: tokens, cached tokens, finish reason; for select, the scores."""
        self.sync()
        if name not in self._meta:
            if self._error is not None:
                raise self._error
            raise KeyError(f"no model call named {name!r}")
        return self._meta[name]

    @property
    def error(self) -> BaseException | None:
        """The exception that stopped this program, if any (run_batch keeps going and stores it here)."""
        self.sync()
        return self._error

    def sync(self) -> None:
        """Wait until every operation queued on this state has run."""
        self._gate.wait()
        with self._cond:
            self._cond.wait_for(lambda: not self._busy and not self._queue)

    def sync_all(self) -> None:
        """Wait for this state and every branch forked from it."""
        self.sync()
        for child in list(self._children):
            child.sync_all()

    # --- forks ---------------------------------------------------------------------------------------
    def fork(self, n: int) -> ForkGroup:
        """`n` branches that continue from this state's text; its prefix is cached once for all of them.

        Returns at once: the fork happens in program order on this state's queue, and the branches start then.
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidArgumentError("fork needs a positive number of branches", param="n")
        k, self._forks = self._forks, self._forks + 1
        branches = [ProgramState(self.config, None, None, (*self.path, f"fork{k}", str(i)), threading.Event())
                    for i in range(n)]
        with self._cond:  # atomic with `fail`: either it sees these branches and fails them, or we see it
            if self._error is not None:
                raise self._error
            self._children.extend(branches)

        def start_branches() -> None:
            if self._doc.text:
                self.config.backend.cache_prefix(self._doc.prompt())  # computed once, before branches ask
            for b in branches:
                b._doc, b._vars = self._doc.copy(), dict(self._vars)
                b._gate.set()

        self._enqueue(start_branches)
        return ForkGroup(branches)

    # --- streaming -----------------------------------------------------------------------------------
    def text_iter(self, name: str | None = None) -> Iterator[str]:
        """Yield text as it is appended: all of it, or only variable `name`'s (ending when it is complete).

        Re-raises the program's error, if any, at the end.
        """
        seen = 0
        while True:
            with self._cond:
                # mypy cannot infer the type of a lambda with a default argument (n: this pass's `seen`)
                self._cond.wait_for(
                    lambda n=seen: len(self._events) > n or self._finished)  # type: ignore[misc]
                events, seen, done = self._events[seen:], len(self._events), self._finished
            for ev in events:
                if name is None or ev.var == name:
                    if ev.delta:
                        yield ev.delta
                    if ev.end and name is not None:
                        return
            if done and seen == len(self._events):
                if self._error is not None:
                    raise self._error
                return

    async def text_async_iter(self, name: str | None = None) -> AsyncIterator[str]:
        """`text_iter` as an async iterator (the waiting happens off the event loop)."""
        it = self.text_iter(name)
        end = object()
        while True:
            chunk = await asyncio.to_thread(next, it, end)
            if chunk is end:
                return
            yield cast(str, chunk)  # not `end`: a str from text_iter

    # --- worker --------------------------------------------------------------------------------------
    def _enqueue(self, op: Callable[[], None]) -> None:
        with self._cond:
            if self._error is not None:
                return  # the program already failed: later operations are dropped
            self._queue.append(op)
            if not self._busy:
                self._busy = True
                threading.Thread(target=self._drain, name="sprig-state", daemon=True).start()

    def _drain(self) -> None:
        self._gate.wait()
        while True:
            with self._cond:
                if not self._queue or self._error is not None:
                    self._queue.clear()
                    self._busy = False
                    self._cond.notify_all()
                    return
                op = self._queue.popleft()
            try:
                op()
            except BaseException as e:  # noqa: BLE001 - stored on the state; readers re-raise it
                self.fail(e)

    def fail(self, error: BaseException) -> None:
        """Record the error that stops this program (the first one wins); branches not started yet fail too."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()
            waiting = [c for c in self._children if not c._gate.is_set()]
        for child in waiting:
            child.fail(error)
            child._gate.set()

    def mark_finished(self) -> None:
        """The program function returned: end every text iterator of this state and its branches."""
        for child in list(self._children):
            child.mark_finished()
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def first_error(self) -> BaseException | None:
        """This state's error, else the first error of any branch."""
        if self._error is not None:
            return self._error
        return next((e for c in self._children if (e := c.first_error()) is not None), None)

    # --- used by the interpreter ---------------------------------------------------------------------
    @property
    def doc(self) -> Document:
        return self._doc

    def next_seed(self, index: int) -> int | None:
        return interpreter.derive_seed(self.config.seed, self.path, index)

    def _emit(self, var: str | None, delta: str) -> None:
        self._doc.append(delta)
        self._record(StreamEvent(var, delta))

    def _emit_template(self, apply: Callable[[], str]) -> None:
        self._record(StreamEvent(None, apply()))

    def _record(self, event: StreamEvent) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def emit(self, var: str | None, text: str, token_ids: tuple[int, ...] | None = None) -> None:
        """Append model output produced for `var`, with its token ids when known."""
        self._doc.append(text, token_ids)
        self._record(StreamEvent(var, text))

    def emit_partial(self, var: str | None, delta: str) -> None:
        """Report streamed output to text iterators (the document gets the whole output at the end)."""
        self._record(StreamEvent(var, delta))

    def end_var(self, var: str | None, text: str, token_ids: tuple[int, ...] | None) -> None:
        """Append a streamed output whose pieces were reported, and end its variable's iterators."""
        self._doc.append(text, token_ids)
        self._record(StreamEvent(var, "", end=True))

    def close_var(self, var: str | None) -> None:
        """End iterators of variable `var` (its text was appended with `emit`)."""
        self._record(StreamEvent(var, "", end=True))

    def store(self, name: str | None, value: Any, meta: dict[str, Any]) -> None:
        """Set a variable and its meta info (unnamed calls keep neither)."""
        if name is not None:
            self._vars[name] = value
            self._meta[name] = meta

    def __repr__(self) -> str:
        return f"ProgramState(path={'/'.join(self.path)}, vars={sorted(self._vars)})"


_OPEN = threading.Event()
_OPEN.set()


class ForkGroup:
    """The branches of one `fork`; `+=` appends to every branch, `group["x"]` lists each branch's `x`."""

    def __init__(self, branches: list[ProgramState]) -> None:
        self.branches = branches

    def __iadd__(self, other: Any) -> ForkGroup:
        for b in self.branches:
            b += other
        return self

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return [b[key] for b in self.branches]
        return self.branches[key]

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.branches)

    def __len__(self) -> int:
        return len(self.branches)

    def join(self) -> list[ProgramState]:
        """Wait for every branch to finish its queued operations; returns the branches."""
        for b in self.branches:
            b.sync_all()
        return self.branches
