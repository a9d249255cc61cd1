"""What an answer knows of its client's connection, below every layer that
answers (the fronts, the routes, the cluster's relay): the link the gateway's
HTTP protocol puts in the scope (link.py), how long the client holds a request
(held.py), and what a connection bound says when it is hit (busy.py). The
protocol itself is the serving layer's (app/serving/http_protocol.py)."""
