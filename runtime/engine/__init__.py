"""The engine room: requests in, tokens out, one forward per step.

`engine.py` is the thread-safe `Engine` front; `core.py` the single-threaded step loop that owns the scheduler
(`scheduler.py`), the KV cache manager over the radix tree and the pool (`kv_cache.py`), the sampler
(`sampler.py`), grammar constraints (`constraints.py`), stop checks (`stop_checker.py`) and incremental
detokenization (`detokenizer.py`); `request.py` and `sampling_params.py` are the data they pass around.
May import: the model and distributed rooms, `sprig.radix`, `sprig.grammar`, `sprig.kernels`, `config`, `errors`.
"""
