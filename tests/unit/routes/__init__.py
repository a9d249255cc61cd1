"""Unit tests of app/routes/: CORS, body reads, scope headers."""
