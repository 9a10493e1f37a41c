"""The ``client.*`` keys: how a client reaches the nimbuses."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from stratus.config.section import Section


class ClientSection(Section):
    """A client of the nimbuses (the CLI, a supervisor, a nimbus fetching code):
    retries, timeouts, token and TLS."""

    prefix: ClassVar[str] = "client"

    client_retry_deadline_secs: float = Field(
        default=30.0,
        gt=0,
        alias="client.retry.deadline.secs",
        description="how long a client keeps retrying a call across a failover",
    )
    client_request_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="client.request.timeout.secs",
        description="timeout of one HTTP request from a client to a nimbus",
    )
    client_connect_timeout_secs: float = Field(
        default=2.0,
        gt=0,
        alias="client.connect.timeout.secs",
        description="how long a client waits for a nimbus to take the connection before it "
        "asks the next one (a dead host answers nothing); client.request.timeout.secs still "
        "bounds the answer, and this never exceeds it",
    )
    client_auth_token: str | None = Field(
        default=None,
        alias="client.auth.token",
        description="bearer token a client (CLI, supervisor, nimbus fetching code) sends to "
        "nimbuses (default: client.auth.token.file, else the STRATUS_TOKEN variable)",
    )
    client_auth_token_file: str | None = Field(
        default=None,
        alias="client.auth.token.file",
        description="file (mode 600) whose first line is the client's bearer token",
    )
    client_tls_ca: str | None = Field(
        default=None,
        alias="client.tls.ca",
        description="PEM CA bundle that signs the nimbuses' certificates; set, clients speak "
        "https to nimbuses and their package servers, and nimbuses to supervisors' endpoints",
    )
    client_tls_cert: str | None = Field(
        default=None,
        alias="client.tls.cert",
        description="PEM client certificate presented to nimbuses (mutual TLS)",
    )
    client_tls_key: str | None = Field(
        default=None,
        alias="client.tls.key",
        description="PEM private key of client.tls.cert (default: in the certificate file)",
    )
