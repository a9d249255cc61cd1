"""The HTTP client library toward the upstream, shared by every HTTP upstream
kind and adapting no era: the answer interface (interface.py), one adapter per
library (h1_adapter.py over h1.py, h1_connection.py and h1_errors.py;
aiohttp_client.py, httpx_adapter.py), TLS and the SSE decoder."""
