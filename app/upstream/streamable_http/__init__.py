"""Legacy Streamable HTTP (2025-03-26 .. 2025-11-25) upstreams: transport.py. A
legacy upstream's transport, under the sessions of app/upstream/sessions/."""
