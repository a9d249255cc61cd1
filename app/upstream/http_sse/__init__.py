"""HTTP+SSE (2024-11-05) upstreams, and detecting them: transport.py."""
