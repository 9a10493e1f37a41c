"""Errors of the ZooKeeper package: each message is one line that names the problem and the fix."""

from __future__ import annotations

from stratus.errors import StratusError


class ZooKeeperServerError(StratusError):
    """The local ZooKeeper server (``stratus zookeeper``, test fixtures) could not do its job."""


class JavaNotFoundError(ZooKeeperServerError):
    """No usable ``java`` executable: none installed, a wrong path, or one older than Java 17."""


class ZooKeeperJarsNotFoundError(ZooKeeperServerError):
    """The ZooKeeper jars that the pyspark wheel ships could not be found."""


class ZooKeeperJavaArgsError(ZooKeeperServerError, ValueError):
    """The arguments of ``stratus zookeeper-java`` name no main class, or a classpath of their
    own (the command gives the ZooKeeper jars' classpath itself)."""


class ZooKeeperPortInUseError(ZooKeeperServerError):
    """A port the server must listen on is already taken by another process."""


class ZooKeeperDataDirError(ZooKeeperServerError):
    """The data directory cannot be created or written, or holds files that are not
    ZooKeeper's."""


class ZooKeeperOptionError(ZooKeeperServerError, ValueError):
    """A server option that ``zoo.cfg`` cannot hold: a host or a path with a line break or
    a control character in it (it would add lines to ``zoo.cfg``), a tick time out of range."""


class ZooKeeperStartError(ZooKeeperServerError):
    """The JVM exited, or did not serve requests in time, after it was launched."""


class ZooKeeperUnavailableError(StratusError):
    """No ZooKeeper server of the ensemble answered within the connection timeout."""


class ZooKeeperAuthError(StratusError):
    """stratus's ZooKeeper identity is misconfigured, or ZooKeeper refuses it what it needs."""


class ZooKeeperHistoryBehindError(ZooKeeperUnavailableError):
    """Every ZooKeeper server that answers has an older history than this client has seen.

    A wiped server, or one restored from an old backup: ZooKeeper refuses the session rather
    than let the client read the past, and a client that only retried would loop forever.
    """
