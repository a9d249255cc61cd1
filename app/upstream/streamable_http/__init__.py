"""Legacy Streamable HTTP (2025-03-26 .. 2025-11-25) upstreams: transport.py."""
