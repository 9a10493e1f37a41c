"""The operators' web UI of a nimbus: the pages at ``/``, their assets, and the JSON reads
they need beyond the rest of the API (docs/ui.md)."""
