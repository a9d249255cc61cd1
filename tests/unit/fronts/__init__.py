"""Unit tests of app/fronts/: the legacy, modern and HTTP+SSE fronts and what they share."""
