"""The router room: `sprig router`, one HTTP front over several `sprig serve` replicas (data parallelism).

`proxy.py` is the app, `policy.py` picks a replica (cache-aware), `workers.py` tracks their health, `launch.py`
starts local replicas, `cli.py` is the command. May import: `sprig.radix` and the server room's HTTP helpers;
it talks to replicas over HTTP only, never to an engine in process.
"""
