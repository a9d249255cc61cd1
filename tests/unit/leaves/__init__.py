"""Unit tests of the modules at the root of app/ (deadline, quoting, metrics,
logs, tracing, splice, the write coalescer)."""
