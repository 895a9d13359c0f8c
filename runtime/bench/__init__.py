"""The bench room: `sprig bench`, a serving benchmark client (datasets, load generation, metrics, reports).

`cli.py` is the command; `client.py` sends the load; `datasets.py`, `metrics.py`, `report.py` build prompts and
summarize; `offline.py` runs an in-process `Engine`; `systems.py` and `gguf.py` start peers (llama.cpp) to
compare against. May import: the engine and model rooms.
"""
