"""The front of 2024-11-05 HTTP+SSE clients: channels over the legacy front."""
