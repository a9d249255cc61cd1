"""Modern (2026-07-28) HTTP upstreams: stateless requests (upstream.py), passed
through to modern clients (passthrough.py), and adapted for legacy clients:
the legacy seam over them (session.py, transport.py), a legacy request's input
rounds (rounds.py), legacy GET streams over `subscriptions/listen`
(listen.py), a legacy client's tasks on the tasks extension (tasks.py), and
the list cache of those sessions (list_cache.py)."""
