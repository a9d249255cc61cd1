"""Unit tests of app/tasks/: the tasks extension, its store, bounds and wind-down."""
