"""The checkpoint's tokenizer: `tokenizer.json` loaded directly with `tokenizers`, plus its chat template.
A GGUF file's tokenizer is built from its metadata instead (`gguf_tokenizer.py`).

`AutoTokenizer` can pick an unusable class for custom tokenizers, and sprig needs only encode, decode and the
template, so the fast tokenizer file is read directly and the Jinja chat template rendered in a sandbox.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer

from sprig.runtime.errors import CheckpointError, RequestError
from sprig.runtime.model.gguf_file import is_gguf_path, open_gguf
from sprig.runtime.model.gguf_tokenizer import gguf_tokenizer

MAX_TEMPLATE_OUTPUT_CHARS = 8 << 20  # a rendered prompt beyond this is a template gone wrong


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


class Tokenizer:
    """Encode/decode and chat templates for one checkpoint folder or GGUF file."""

    hf: HFTokenizer
    config: dict[str, Any]  # tokenizer_config.json (empty for a GGUF file)
    bos_token: str | None
    eos_token: str | None
    add_bos: bool
    chat_template: str | None

    def __init__(self, path: str | Path) -> None:
        """`path`: a checkpoint folder (`tokenizer.json`, `tokenizer_config.json`) or a GGUF file."""
        if is_gguf_path(path):
            self._from_gguf(Path(path))
        else:
            self._from_folder(Path(path))
        self.bos_token_id = self.hf.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_token_id = self.hf.token_to_id(self.eos_token) if self.eos_token else None
        self.special_token_ids = frozenset(i for i, t in self.hf.get_added_tokens_decoder().items() if t.special)
        self._env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._env.globals["raise_exception"] = _raise_template_error
        self._env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
        self._template = self._env.from_string(self.chat_template) if self.chat_template else None

    def _from_folder(self, folder: Path) -> None:
        path = folder / "tokenizer.json"
        if not path.exists():
            raise CheckpointError(f"no tokenizer.json in {folder}")
        try:
            self.hf = HFTokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises plain Exceptions for malformed files
            raise CheckpointError(f"tokenizer.json cannot be loaded: {e}") from None
        cfg_path = folder / "tokenizer_config.json"
        self.config = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        self.bos_token = _token_content(self.config.get("bos_token"))
        self.eos_token = _token_content(self.config.get("eos_token"))
        self.add_bos = bool(self.config.get("add_bos_token", False)) and self.bos_token is not None
        self.chat_template = self._find_chat_template(folder)

    def _from_gguf(self, path: Path) -> None:
        built = gguf_tokenizer(open_gguf(path))
        self.hf = built.hf
        self.config = {}
        self.bos_token, self.eos_token, self.add_bos = built.bos_token, built.eos_token, built.add_bos
        self.chat_template = built.chat_template

    def _find_chat_template(self, folder: Path) -> str | None:
        jinja = folder / "chat_template.jinja"
        if jinja.exists():
            return jinja.read_text()
        template = self.config.get("chat_template")
        if isinstance(template, list):  # named templates: take "default"
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            return named.get("default") or next(iter(named.values()), None)
        return template

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer can produce (the model's vocab may be padded beyond it)."""
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special-token strings in the text are recognized, as transformers does."""
        # The batch call releases the GIL (`encode` holds it: one 3 MB prompt froze the event loop for 20 s);
        # `_fast` skips the offsets sprig never reads.
        ids = self.hf.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids
        bos = self.bos_token_id
        if add_special_tokens and self.add_bos and bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]  # a BOS missing from the vocabulary cannot be prepended (None is no token id)
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self.hf.id_to_token(token_id)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        """Render messages with the checkpoint's template (sandboxed, output size bounded)."""
        if self._template is None:
            raise RequestError("this model has no chat template", param="messages", code="no_chat_template")
        try:
            text = self._template.render(
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
            )
        except TemplateError as e:
            raise RequestError(f"chat template failed: {str(e)[:200]}", param="messages") from None
        if len(text) > MAX_TEMPLATE_OUTPUT_CHARS:
            raise RequestError("rendered chat prompt is too large", param="messages")
        return text


def _raise_template_error(message: str) -> None:
    raise TemplateError(message)
