"""The engine room: requests in, tokens out, one forward per step.

`engine.py` is the thread-safe `Engine` front and its stream iterators; `core.py` the single-threaded step loop
that owns the scheduler (`scheduler.py`), the KV cache manager over the radix tree and the pool (`kv_cache.py`),
the sampler (`sampler.py`, running penalty counts in `penalties.py`), grammar constraints (`constraints.py`),
incremental detokenization and stop checks (`output_text.py`, with `stop_regex.py`). `request.py` is a
request, the deltas it reports each step and the bounded channel its caller reads; `generate_request.py` what a
caller asks for (the call and its sampling parameters); `summary.py` the start-up block.
May import: the model and distributed rooms, `sprig.radix`, `sprig.grammar`, `sprig.kernels`, `config`, `errors`.
"""
