"""The server room: the HTTP API over one `Engine` (FastAPI + uvicorn + orjson).

`app.py` builds the app; `openai_routes.py` and `native_routes.py` (with `native_stream.py`) hold the routes, which
share body reading, responses and the OpenAI error shapes through `http_common.py`; `openai_protocol.py`,
`openai_convert.py` (requests and chat messages → engine calls, results → responses), `openai_tools.py` (with
`tool_formats.py`, the tool-call formats by family) and `openai_output.py` are the OpenAI protocol; `run.py` follows one generation against disconnects, deadlines and
shutdown; `state.py`, `auth.py` and `metrics.py` are the server's state (with its token-text cache), tenants and
Prometheus metrics; `cli.py` is `sprig serve`. May import: the engine room and everything below it.
"""
