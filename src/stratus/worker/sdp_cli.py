"""pyspark's ``spark-pipelines`` command line, with the run's Connect server on a port of its own.

An sdp run starts a Spark Connect server inside itself and connects to it. pyspark's own
command line binds that server to port 15002 and connects there: two runs on one host (two
pipelines, or one pipeline's worker on another supervisor of the host, a moment after a move)
collide, and the second fails to start. stratus runs this file in place of pyspark's CLI
(``spark-class org.apache.spark.deploy.SparkPipelines <this file> ...``): the worker's
settings bind the server to an ephemeral port on loopback, and the client asks the server
which port it got, as pyspark's own tests do. Everything else is pyspark's CLI, unchanged.

The file runs under the worker's Python as spark-submit's main script: it imports pyspark
alone, so it works in a pipeline's own environment too.
"""

from __future__ import annotations

from pyspark.pipelines import cli
from pyspark.sql.connect.client.core import DefaultChannelBuilder
from pyspark.sql.session import SparkSession

PYSPARK_DEFAULT_PORT = 15002
CONNECT_SERVICE = "org.apache.spark.sql.connect.service.SparkConnectService$"


def local_server_port() -> int:
    """The port of the Connect server this process started, else pyspark's default (a
    ``sc://`` master that names no port)."""
    session = SparkSession._instantiatedSession
    if session is None:
        return PYSPARK_DEFAULT_PORT
    service = getattr(getattr(session._jvm, CONNECT_SERVICE), "MODULE$")
    return int(service.localPort())


def main() -> None:
    DefaultChannelBuilder.default_port = staticmethod(local_server_port)  # type: ignore[method-assign]
    cli.main()


if __name__ == "__main__":
    main()
