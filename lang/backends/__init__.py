"""Backends that run program calls: the local engine, a sprig server, any OpenAI-compatible server."""

from sprig.lang.backends.base import Backend, ChoiceLogprobs, GenOutput, Prompt, StreamChunk
from sprig.lang.backends.local import LocalBackend
from sprig.lang.backends.openai_compat import OpenAICompatible, OpenAIMode
from sprig.lang.backends.runtime_endpoint import RuntimeEndpoint

__all__ = ["Backend", "ChoiceLogprobs", "GenOutput", "LocalBackend", "OpenAICompatible", "OpenAIMode", "Prompt",
           "RuntimeEndpoint", "StreamChunk"]
