"""What the fronts of every client era share: the answer writer, the Host and
Origin guard, the guard on the header values a front forwards, and a session's
binding to the credential that opened it."""
