"""Extract structured records from free text with a JSON Schema (valid by construction where the engine has
its grammar wired in).

    python examples/json_extraction.py
"""

from __future__ import annotations

import json
from typing import Any

import sprig

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "city": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
    },
    "required": ["name", "city", "age"],
    "additionalProperties": False,
}

TEXTS = [
    "Ada Lovelace, 36, lived in London and wrote the first program.",
    "Alan Turing was 41 and worked in Manchester on early computers.",
    "Grace Hopper, aged 85, spent most of her career in Arlington.",
]


@sprig.function
def extract(s: sprig.ProgramState, text: str) -> None:
    s += sprig.system("Extract the person described in the text as JSON.")
    s += sprig.user(text)
    s += sprig.assistant(sprig.gen("record", json_schema=SCHEMA, max_tokens=96))


def main(engine: Any) -> list[dict[str, Any]]:
    """Extract every text; returns one {"text", "raw", "record" (parsed or None)} per text."""
    states = extract.run_batch([{"text": t} for t in TEXTS], backend=engine, temperature=0)
    rows = []
    for text, st in zip(TEXTS, states, strict=True):
        raw = st["record"]
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            record = None  # only possible while the engine does not enforce the schema yet
        rows.append({"text": text, "raw": raw, "record": record})
        print(f"{text}\n  -> {record if record is not None else 'not JSON: ' + repr(raw[:60])}")
    return rows


if __name__ == "__main__":
    with sprig.Engine() as engine:  # the default model, SmolLM2-135M-Instruct; shut down cleanly at the end
        main(engine)
