"""Unit tests of the settings (app/settings/): loading, checking, the generated docs."""
