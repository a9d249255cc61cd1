"""Checks across the whole tree: the import graph, the docs, the function
bound, the bench scripts, the deployment manifests, the test layout and the
no-sleep rule."""
