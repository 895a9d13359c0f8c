"""sprig.lang: write an LLM program as one Python function; its calls share KV by construction.

    @sprig.function
    def qa(s, question):
        s += sprig.user(question)
        s += sprig.assistant(sprig.gen("answer", max_tokens=64))

    state = qa.run(question="...", backend=sprig.Engine())
    print(state["answer"])
"""

from sprig.lang.backends import (
    Backend,
    LocalBackend,
    OpenAICompatible,
    OpenAIMode,
    RuntimeEndpoint,
)
from sprig.lang.errors import (
    BackendError,
    InvalidArgumentError,
    LangError,
    ParseError,
    ProgramStateError,
    UnsupportedError,
)
from sprig.lang.function import SprigFunction, function, get_default_backend, set_default_backend
from sprig.lang.ir import Dtype, Role, SelectMethod
from sprig.lang.primitives import (
    assistant,
    assistant_begin,
    assistant_end,
    gen,
    select,
    system,
    system_begin,
    system_end,
    user,
    user_begin,
    user_end,
)
from sprig.lang.state import ForkGroup, ProgramState

__all__ = [
    "Backend", "BackendError", "Dtype", "ForkGroup", "InvalidArgumentError", "LangError", "LocalBackend",
    "OpenAICompatible", "OpenAIMode", "ParseError", "ProgramState", "ProgramStateError", "Role",
    "RuntimeEndpoint", "SelectMethod", "SprigFunction", "UnsupportedError", "assistant", "assistant_begin",
    "assistant_end", "function", "gen", "get_default_backend", "select", "set_default_backend", "system",
    "system_begin", "system_end", "user", "user_begin", "user_end",
]
