"""`subscriptions/listen` for modern clients of legacy upstreams (the other
direction, a modern upstream's listen behind legacy GET streams, is
app/upstream/modern/listen.py).

- filters.py: the notification filter, cut to the upstream's capabilities (pure)
- frames.py: ack, tagged notifications, closing result, errors (pure)
- refcount.py: per-URI reference counts for resources/subscribe (pure)
- mailbox.py: one listener's bounded queue and how it ends
- hub.py: per-session fan-out, upstream GET stream and subscribe/unsubscribe
- listen.py: the generator the gateway yields one listen stream from
"""
