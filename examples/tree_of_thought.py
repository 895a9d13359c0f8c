"""Tree of thought: propose several next steps with `fork`, rate each with `select`, expand the best one.

Every branch continues from the same cached text, so each level computes its shared prefix once.

    python examples/tree_of_thought.py
"""

from __future__ import annotations

from typing import Any

import sprig

RATINGS = [" sure", " likely", " impossible"]
SCORE = {" sure": 2.0, " likely": 1.0, " impossible": 0.0}


@sprig.function
def tree_of_thought(s: sprig.ProgramState, problem: str, branching: int = 3, depth: int = 2) -> list[str]:
    s += f"Problem: {problem}\nLet's solve it step by step.\n"
    path = []
    for level in range(depth):
        forks = s.fork(branching)
        forks += f"Step {level + 1}:" + sprig.gen("step", max_tokens=16, stop="\n")
        forks += "\nCan this step lead to a solution? Answer:" + sprig.select("rating", RATINGS)
        forks.join()
        # The best branch by its rating, ties broken by the select score of that rating.
        best = max(forks, key=lambda f: (SCORE[f["rating"]], max(f.get_meta_info("rating")["scores"])))
        s += f"Step {level + 1}:{best['step']}\n"
        path.append(best["step"])
    s += "Answer:" + sprig.gen("answer", max_tokens=16, stop="\n")
    return path


def main(engine: Any) -> dict[str, Any]:
    """Solve one problem; returns the chosen steps, the answer and the text."""
    st = tree_of_thought.run(problem="Use 4, 7, 8 and 8 with + - * / to make 24.", backend=engine,
                             temperature=0.8, seed=0)
    for i, step in enumerate(st.ret_value, 1):
        print(f"step {i}: {step!r}")
    print(f"answer: {st['answer']!r}")
    return {"steps": st.ret_value, "answer": st["answer"], "text": st.text()}


if __name__ == "__main__":
    with sprig.Engine() as engine:  # the default model, SmolLM2-135M-Instruct; shut down cleanly at the end
        main(engine)
