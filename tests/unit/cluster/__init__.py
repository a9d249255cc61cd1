"""Unit tests of app/cluster/: replicas, MRTR forwarding between them, legacy
guest copies and notes."""
