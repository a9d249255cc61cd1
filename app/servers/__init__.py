"""Many servers behind one gateway (MCP_SHIM_SERVERS_FILE): each server's own
object graph (app/wiring.py) and routes under `/servers/NAME/`, started and
stopped together, and the gateway's readiness, metrics and probe over them."""
