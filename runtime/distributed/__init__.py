"""The distributed room: tensor-parallel ranks over `torch.distributed`.

`tp_group.py` runs on rank 0 and drives the others; `tp_worker.py` is the other ranks' loop; `tp_protocol.py` is
what travels between them. May import: the model room, `sprig.runtime.config`, `sprig.runtime.errors`.
"""
