"""pacemaker: an in-memory heartbeat store, so that heartbeats do not load ZooKeeper.

``protocol`` (frames), ``store`` (the tree of pulses), ``auth`` (who may read and write what),
``server`` (the asyncio daemon), ``client`` (one connection, and a pool over several servers).
"""
