"""Loading and checking the gateway's settings (app/config.py's `Settings`)."""
