"""A legacy upstream's sessions, for clients of every era: the pool of
sessions keyed by credential and capabilities (pool.py), the era probe and the
seam by era (era.py, era_transport.py), the routing of one shared server
stream's messages (routing.py), a session's standalone GET stream
(listener.py), and /readyz's check on the pool (readiness.py). The transports
under them are streamable_http/, http_sse/ and stdio/."""
