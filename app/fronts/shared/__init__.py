"""What the fronts of every client era share: the answer writer, the Host and
Origin guard, the guard on the header values a front forwards, and the OAuth
pass-through (auth.py). A session's binding to the credential that opened it
is the session's own (app/cluster/session.py `held_by`)."""
