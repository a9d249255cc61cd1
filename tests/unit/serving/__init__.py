"""Unit tests of the serving layer (app/serving/): the process, the CLI, the
uvicorn protocol, the workers and their balance and hand-off."""
