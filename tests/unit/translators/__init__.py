"""Unit tests of translators/: the revision registry, steps, capabilities, golden examples."""
