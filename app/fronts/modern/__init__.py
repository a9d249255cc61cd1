"""The front of modern (2026-07-28) clients: `checks` validates, `gateway` runs one call."""
