"""The model room: a checkpoint folder turned into a forward pass over the paged KV pool.

Owns the HF config (`config.py`), checkpoint discovery and the demo model (`checkpoints.py`), the tokenizer, weight
loading and quantization, the one decoder family (`decoder.py`), rotary embeddings, tensor-parallel shards
(`parallel.py`), the KV pool (`kv_pool.py`, which slots hold which K/V; the engine decides who owns them) and the
runner that turns a batch of sequences into one forward, eager or replayed from a graph (`runner.py`, with
`cpu_graph.py` for the CPU's graphs).
May import: `sprig.kernels`, `sprig.runtime.config`, `sprig.runtime.errors`. Never the engine, server or router.
"""
