"""The nimbus, stratus's master daemon (docs/architecture.md, docs/nimbus.md).

At the top, the hub: ``daemon`` (``Nimbus(settings)``, which wires every part) with
``code_wiring`` (its code side: package store, package server, code distributor, code sync),
``duty_wiring`` (the leader's duties and the failover lane beside them) and ``local_dir`` (the
default directory of the package store), ``settings``, ``service`` and ``submission`` (what
each API call does), ``cluster_view`` and ``metrics``. The rest lives in wings, top to bottom:
``http`` (the API), ``ui`` (the web UI), ``duties`` (the leader's duties), ``leadership`` and
``scheduling``, and on the ground ``records`` (what the leader records of each pipeline). A
module imports only from its own wing or from those below it (an import-linter contract in
pyproject.toml).
"""
