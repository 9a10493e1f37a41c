"""The shared vocabulary of stratus: records, errors, names and pipeline conf, with no I/O."""
