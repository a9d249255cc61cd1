"""Unit tests of app/subscriptions/: the listen streams' hub, filters and mailboxes."""
