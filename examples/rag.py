"""Answer many questions over one shared document: the document's KV is computed once and reused by every
question (the batch's constant prefix is found by tracing and cached before the batch runs).

    python examples/rag.py
"""

from __future__ import annotations

from typing import Any

import sprig

DOCUMENT = " ".join([
    "The Apache License, Version 2.0, is a permissive free software license written by the Apache Software",
    "Foundation. It allows users to use the software for any purpose, to distribute it, to modify it, and to",
    "distribute modified versions of the software under the terms of the license, without concern for royalties.",
    "The license requires preservation of the copyright notice and disclaimer. Unlike copyleft licenses, it does",
    "not require modified versions to be distributed under the same terms. Contributors grant a patent license",
    "for their contributions; that grant terminates for anyone who sues claiming the work infringes a patent.",
    "Redistributions must carry a copy of the license, must mark modified files as changed, and must keep the",
    "NOTICE file's attribution notices. Version 2.0 was approved in January 2004.",
] * 4)

QUESTIONS = [
    "Who wrote the license?", "Is it a copyleft license?", "When was version 2.0 approved?",
    "What happens to the patent grant after a patent lawsuit?", "Must modified files be marked?",
    "Can the software be used commercially?", "What file keeps attribution notices?",
    "Are royalties required?", "May modified versions use other terms?", "What must redistributions carry?",
    "Does it grant a patent license?", "What notice must be preserved?",
]


@sprig.function
def answer(s: sprig.ProgramState, question: str) -> None:
    s += sprig.system("Answer from the document only, in one sentence.\n\nDocument:\n" + DOCUMENT)
    s += sprig.user(question)
    s += sprig.assistant(sprig.gen("answer", max_tokens=24, stop="\n"))


def main(engine: Any) -> dict[str, Any]:
    """Answer every question; returns the answers and the engine's cache hit rate."""
    states = answer.run_batch([{"question": q} for q in QUESTIONS], backend=engine, temperature=0,
                              progress_bar=True)
    for q, st in zip(QUESTIONS, states, strict=True):
        print(f"Q: {q}\nA: {st['answer']!r}  (cached {st.get_meta_info('answer')['cached_tokens']} of "
              f"{st.get_meta_info('answer')['prompt_tokens']} prompt tokens)")
    hit = engine.stats()["cache_hit_rate"]
    print(f"cache hit rate: {hit:.0%}")
    return {"answers": [st["answer"] for st in states], "cache_hit_rate": hit,
            "cached_tokens": [st.get_meta_info("answer")["cached_tokens"] for st in states]}


if __name__ == "__main__":
    with sprig.Engine() as engine:  # the default model, SmolLM2-135M-Instruct; shut down cleanly at the end
        main(engine)
