"""Modern (2026-07-28) HTTP upstreams: stateless requests (upstream.py) and the
legacy seam over them (session.py)."""
