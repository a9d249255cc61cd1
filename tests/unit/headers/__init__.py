"""Unit tests of app/headers/: the parameter headers."""
