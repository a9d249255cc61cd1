"""What crosses processes and replicas: a process's state has an owner, and
what a client holds names it under a seal.

- sealing.py: the state key (`MCP_SHIM_STATE_KEY`), its rotation, `Sealer`;
- replicas.py: owned ids, the owner's name, and the relay to the owner;
- forwarding.py: an MRTR retry forwarded to the replica holding its exchange;
- session.py: a legacy session as the owner and its guest copies hold it;
- guests.py: guest copies of another worker's legacy sessions, and the
  owner's side of them;
- notes.py: the sealed notes replicas send each other about those sessions.

Below the fronts (which use it) and beside mrtr/, tasks/ and subscriptions/;
nothing in the upstream or the leaves imports it. The serving layer's
connection handoff reaches the relay through a protocol (replicas.py `Handoff`).
"""
