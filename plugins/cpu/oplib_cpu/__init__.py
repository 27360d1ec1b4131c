"""oplib's CPU backend (numpy). Installed, it is found through the ``oplib`` entry point."""
