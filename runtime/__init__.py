"""sprig.runtime: everything between a checkpoint folder and an HTTP client, one subpackage per concern.

Rooms, each importing only the rooms below it (docs/architecture.md draws the map):

- `server/`, `router/`, `bench/`: the HTTP front, the data-parallel router, the `sprig bench` client;
- `engine/`: `Engine`, its core loop, scheduler, requests, sampler, stop checks, detokenizer, KV cache manager;
- `distributed/`: tensor-parallel ranks (the group on rank 0, the worker loop on the others);
- `model/`: checkpoint config, loader, tokenizer, the decoder, quantization, the KV pool and the model runner;
- `config.py` (the options every room reads), `errors.py` (their shared exceptions) and `cli.py` (the `sprig` command).
"""
