"""The server room: the HTTP API over one `Engine` (FastAPI + uvicorn + orjson).

`app.py` builds the app; `openai_routes.py` and `native_routes.py` hold the routes, which share their helpers
through `http_common.py`; `openai_*.py` are the OpenAI protocol (models, message rendering, tools, output);
`run.py` follows one generation against disconnects, deadlines and shutdown; `state.py`, `auth.py`,
`metrics.py`, `http_body.py` and `http_errors.py` are the server's state, tenants, Prometheus metrics, body
limits and error shapes; `cli.py` is `sprig serve`. May import: the engine room and everything below it.
"""
