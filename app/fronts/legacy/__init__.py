"""The front of legacy (2024-11-05 .. 2025-11-25) Streamable HTTP clients."""
