"""Pipeline code: packages, their validation, and their distribution between nimbuses.

A package is a ``.zip`` (or a directory, zipped by the client) holding a ``stratus.yaml``
manifest. It is checked on the client and again on the nimbus before anything is stored,
stored under its sha256, and replicated to other nimbuses by a ``CodeDistributor`` chosen
by ``nimbus.code.distributor``: each nimbus's local disk (``local_fs``) or one shared
fsspec store (``shared_fs``). ``code_sync`` keeps a nimbus's copies in line with the
pipelines ZooKeeper lists.
"""
