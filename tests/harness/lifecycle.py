"""What every harness that a ``with`` block starts and stops shares: the cluster across hosts
(``hosts_cluster.py``), the chaos suite's cluster (``chaos_cluster.py``), the hosts of network
namespaces (``netns_hosts.py``) and the TCP proxy (``tcp_proxy.py``)::

    class Hosts(Started):
        def start(self) -> None: ...   # bring everything up
        def close(self) -> None: ...   # take down whatever runs, even after a partial start

    with Hosts() as hosts:             # start(); close() at the end, or at once if start() fails
        ...
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Started:
    """A harness that ``with`` starts and closes. ``__enter__`` runs ``start()``; when that fails
    part way, ``close()`` runs before the error goes on, so nothing a partial start made (a
    process, a namespace, a listening socket) outlives the test. ``close()`` must therefore take
    down whatever runs, however far ``start()`` got, and may be called twice."""

    def start(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define start()")

    def close(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define close()")

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
