"""The gateway's settings as an operator gives them: read from the flags, the
environment and the settings file (`load`), checked and explained (`check`,
`rules`), the fixed upstream headers (`headers`), `mcp-shim config`
(`command`) and the servers file of many servers (`servers`). The model
itself, `Settings`, is app/config.py, which imports nothing of the gateway;
this package sits beside app/serving and may import anything below."""
