"""Tasks across eras: the records of long-running calls, whoever runs them.
For modern clients it adapts a legacy upstream (a 2025-11-25 server's tasks,
or a plain call run as a task by the gateway); a legacy client's tasks on a
modern upstream are app/upstream/modern/tasks.py's."""
