"""stdio upstreams: a server process (process.py), one process as a legacy
session (session.py), the processes and their bounds (transport.py, room.py)
and their containment (containment.py). A legacy upstream's transport, under
the sessions of app/upstream/sessions/."""
