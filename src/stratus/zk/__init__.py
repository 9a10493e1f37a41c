"""ZooKeeper: the session a process owns (``session``), the znode layout (``paths``), watched
mirrors (``watched``) and ephemeral registrations (``ephemeral``), and the local server
(``server``, ``ensemble``) that ``stratus zookeeper`` and the test suite run. Import each from
its module: this package init loads nothing, so ``stratus.zk.paths`` costs no server code."""
