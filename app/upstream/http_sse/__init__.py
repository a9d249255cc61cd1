"""HTTP+SSE (2024-11-05) upstreams, and detecting them: transport.py. A legacy
upstream's transport, under the sessions of app/upstream/sessions/."""
