"""Pure MCP message translators, one module per protocol version.

``registry`` orders the versions and folds each module's delta into its
features; ``translate`` chains the modules' step functions to move a message
between any two versions. No I/O and no third-party imports here.
"""
