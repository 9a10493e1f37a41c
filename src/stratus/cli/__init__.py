"""The ``stratus`` command line: every daemon and client verb, thin over the library."""
