"""Unit tests of app/upstream/: transports, sessions, the pool, the HTTP client, stdio processes."""
