"""The modern revision's header forms (`Mcp-Name`, `Mcp-Param-*`), which both sides use.

The modern front checks a client's headers with them and the modern upstream
writes its own; they sit below both so neither side imports the other.
"""
