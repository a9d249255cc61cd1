"""The in-process HTTP tier of the unit tests: the gateway's ASGI application
(app/server.py `create_app`) driven through httpx.ASGITransport, its lifespan
run in the test's loop, in front of the scripted upstream the seam tests use
(tests/seam_fake.py). What is checked here is HTTP-level behaviour of the
gateway's own code, without a process or a socket: status codes, headers, the
rejection table (each Rejection's HTTP status), the Origin and Host checks,
body limits, CORS. The scripted upstream is a unit-level double: evidence
about interoperation with real peers comes from tests/integration only."""
