"""stdio upstreams: server processes (transport.py) and their containment."""
