"""The multi round-trip bridge: legacy server-initiated requests become `input_required`.
It adapts a legacy upstream for modern clients (as app/tasks/ and
app/subscriptions/ do); the other direction is app/upstream/modern/.

A legacy server asks its client for input in the middle of a call
(`elicitation/create`, `sampling/createMessage`, `roots/list`); a 2026-07-28
client expects an `InputRequiredResult` and retries the call with
`inputResponses` and the echoed `requestState`. The bridge keeps the upstream
call alive ("parks" it) between the two.

Pure modules (no I/O, unit-tested):

- ``state``: what `requestState` binds, sealed and opened with the
  cluster's sealing (app/cluster/sealing.py);
- ``keys``: the `inputRequests` keys of one call;
- ``capabilities``: which client capability an upstream request needs;
- ``answers``: validation of `inputResponses`;
- ``results``: what the bridge answers (InputRequiredResult, -32021, the
  replies it sends upstream on its own).

I/O modules:

- ``lanes``: exclusive upstream sessions, so a request the upstream sends on
  its session's GET stream can only belong to one call;
- ``exchange``: one live upstream call and the events it produces;
- ``parked``: the registry of parked exchanges, with TTL and bound;
- ``forwarder``: one modern call's upstream part (translate, send, relay,
  answer), shared by the gateway, the bridge and the tasks bridge;
- ``turn``: one HTTP request's turn, the settings;
- ``parking``: parking an exchange (``input_required``), settling a turn,
  ending an exchange;
- ``driving``: sending the call and reading its events to the next stop;
- ``bridge``: the orchestration (a first call, a retry), called by
  ``app.fronts.modern.gateway``.

The hop to the replica that holds an exchange is the cluster's
(app/cluster/forwarding.py).
"""
