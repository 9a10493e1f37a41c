"""The worker: one process, a PySpark driver, that runs one pipeline.

Its contract with the supervisor is ``WorkerSpec`` (``spec.py``); it never talks to ZooKeeper
(kazoo is not fork-safe and PySpark forks).
"""
