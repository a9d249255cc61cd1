"""Unit tests of app/probe/: the mcp-shim probe command."""
