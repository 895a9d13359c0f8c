"""Schema text → parsed schema: exact decimals, no NaN, bounded size and depth (both backends start here)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from sprig.grammar.errors import GrammarError, too_complex

MAX_SCHEMA_CHARS = 4_000_000


def parse_json(text: str) -> Any:
    """json.loads with exact decimals and without NaN/Infinity."""
    def reject(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_float=Decimal, parse_constant=reject)


def load_schema(schema: str | dict[str, Any] | bool) -> Any:
    """Parse schema text (exact decimals, no NaN) or pass a parsed schema through."""
    if not isinstance(schema, str):
        try:  # why: one path for all inputs: exact decimals, no NaN, a depth check
            schema = json.dumps(schema, ensure_ascii=False, allow_nan=True)
        except (TypeError, ValueError) as exc:
            raise GrammarError(f"schema is not JSON: {str(exc)[:120]}") from None
        except RecursionError:
            raise too_complex("schema nested too deeply") from None
    if len(schema) > MAX_SCHEMA_CHARS:
        raise too_complex(f"schema longer than {MAX_SCHEMA_CHARS} characters")
    try:
        return parse_json(schema)
    except RecursionError:
        raise too_complex("schema nested too deeply") from None
    except ValueError as exc:
        raise GrammarError(f"invalid JSON in schema: {str(exc)[:120]}") from None
