"""The front of modern (2026-07-28) clients: `checks` validates, `front` picks
the path, `passthrough` sends a call to a modern upstream as it came,
`gateway` runs one translated call."""
