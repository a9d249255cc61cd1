"""Unit tests of app/mrtr/: the multi-round-trip bridge, parked exchanges, request state."""
