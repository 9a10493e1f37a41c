"""A real MIT Kerberos KDC on loopback for tests: realm, principals, keytabs, no DNS.

The ``kdc`` fixture (``conftest.py``, one KDC per test session) runs Debian's ``krb5kdc`` as a
child process on a free loopback port, with its own ``krb5.conf``, ``kdc.conf`` and database in
a temporary directory; nothing of the machine's Kerberos setup (``/etc/krb5.conf``) is read or
changed. Principals and keytabs come from ``kadmin.local``::

    def test_x(kdc: Kdc, tmp_path: Path) -> None:
        keytab = kdc.keytab(tmp_path / "alice.keytab", kdc.add_principal("alice"))
        env = kdc.client_env(tmp_path / "alice.cc", keytab)   # KRB5_CONFIG, KRB5CCNAME, ...

Without the packages (``krb5-kdc``, ``krb5-admin-server``, ``krb5-user``) and when they
cannot be installed, the tests that use the fixture skip, saying so.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from stratus.process import Lifeline, ProcessGroup
from stratus.zk.ports import LOOPBACK, pick_free_port

REALM = "STRATUS.TEST"
PACKAGES = ("krb5-kdc", "krb5-admin-server", "krb5-user")
TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")
SBIN_DIRS = ("/usr/sbin", "/sbin")
START_TIMEOUT_SECS = 20.0
COMMAND_TIMEOUT_SECS = 60.0
POLL_SECS = 0.02


class KdcUnavailableError(RuntimeError):
    """The KDC's programs are missing: the tests skip."""


def find_tools() -> dict[str, str]:
    """The path of every MIT Kerberos program the KDC needs (``.ci/run`` installs them)."""
    found = _which_all()
    missing = sorted(set(TOOLS) - set(found))
    if missing:
        raise KdcUnavailableError(
            f"no MIT Kerberos KDC: {', '.join(missing)} not found; install the packages "
            f"{' '.join(PACKAGES)}"
        )
    return found


def _which_all() -> dict[str, str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])
    found = {tool: shutil.which(tool, path=path) for tool in TOOLS}
    return {tool: where for tool, where in found.items() if where}


class Kdc:
    """One KDC process serving ``realm`` on ``127.0.0.1:port`` (TCP and UDP).

    ``krb5_conf`` is the client configuration every Kerberos user of the test reads (through
    ``KRB5_CONFIG`` for MIT's library, ``-Djava.security.krb5.conf`` for Java): the realm's KDC
    by address, and no DNS lookups of KDCs, realms or host names.
    """

    def __init__(self, directory: Path, realm: str = REALM) -> None:
        self.directory = directory.absolute()
        self.realm = realm
        self.port = pick_free_port()
        self.krb5_conf = self.directory / "krb5.conf"
        self.kdc_conf = self.directory / "kdc.conf"
        self.log_path = self.directory / "kdc.log"
        self._tools = find_tools()
        self._group: ProcessGroup | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Write the configuration, create the database, start ``krb5kdc`` and wait until it
        accepts connections."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.krb5_conf.write_text(self._krb5_conf_text(), encoding="utf-8")
        self.kdc_conf.write_text(self._kdc_conf_text(), encoding="utf-8")
        master = secrets.token_hex(16)
        self._run("kdb5_util", "-r", self.realm, "create", "-s", "-P", master)
        with self.log_path.open("ab") as log:
            self._group = ProcessGroup.start(
                [self._tools["krb5kdc"], "-n", "-r", self.realm],
                lifeline=Lifeline.DEATH_SIGNAL,
                env=self.admin_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not self._accepts():
            code = self._group.poll()
            if code is not None or time.monotonic() >= deadline:
                self.stop()
                raise RuntimeError(
                    f"krb5kdc did not serve on {LOOPBACK}:{self.port} (exit code {code}); "
                    f"see {self.log_path}"
                )
            time.sleep(POLL_SECS)

    def stop(self) -> None:
        """Stop the KDC (SIGTERM, then SIGKILL); idempotent."""
        if self._group is not None:
            self._group.stop(5.0)
            self._group = None

    def is_running(self) -> bool:
        return self._group is not None and self._group.is_running()

    # -- principals and keytabs -----------------------------------------------------------------

    def principal(self, name: str) -> str:
        """``name@REALM`` (``name`` may be ``service/host``)."""
        return f"{name}@{self.realm}"

    def add_principal(self, name: str) -> str:
        """Create ``name@REALM`` with a random key unless it exists (the KDC is shared by the
        whole session); return the full principal."""
        principal = self.principal(name)
        self._kadmin(f"addprinc -randkey {principal}", tolerate="already exists")
        return principal

    def modify_principal(self, principal: str, options: str) -> None:
        """``modprinc`` with ``options`` (``-maxlife "3 seconds"``: short tickets)."""
        self._kadmin(f"modprinc {options} {principal}")

    def keytab(self, path: Path, *principals: str) -> Path:
        """Write the current keys of ``principals`` into the keytab ``path`` (mode 600).

        ``-norandkey`` keeps the keys: keytabs written earlier for the same principal (by
        another test module) keep working.
        """
        for principal in principals:
            self._kadmin(f"ktadd -norandkey -k {path.absolute()} {principal}")
        path.chmod(0o600)
        return path

    def client_env(self, ccache: Path, client_keytab: Path | None = None) -> dict[str, str]:
        """The environment of a Kerberos client: this realm's ``krb5.conf``, its own ticket
        cache and, if given, the client keytab that GSSAPI takes initial tickets from."""
        env = {"KRB5_CONFIG": str(self.krb5_conf), "KRB5CCNAME": f"FILE:{ccache.absolute()}"}
        if client_keytab is not None:
            env["KRB5_CLIENT_KTNAME"] = f"FILE:{client_keytab.absolute()}"
        return env

    def admin_env(self) -> dict[str, str]:
        """The environment of the KDC's own programs (``kdb5_util``, ``kadmin.local``)."""
        return {
            **os.environ,
            "KRB5_CONFIG": str(self.krb5_conf),
            "KRB5_KDC_PROFILE": str(self.kdc_conf),
        }

    # -- internals ------------------------------------------------------------------------------

    def _kadmin(self, query: str, tolerate: str | None = None) -> None:
        self._run("kadmin.local", "-r", self.realm, "-q", query, tolerate=tolerate)

    def _run(self, tool: str, *args: str, tolerate: str | None = None) -> None:
        result = subprocess.run(
            [self._tools[tool], *args],
            env=self.admin_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECS,
            check=False,
        )
        # kadmin.local reports a failed query on stderr with exit code 0, in the words of
        # MIT's com_err: "<what> while <doing>".
        failures = [
            line
            for line in result.stderr.splitlines()
            if " while " in line and not (tolerate and tolerate in line)
        ]
        if result.returncode != 0 or failures:
            shown = " ".join(
                "***" if before == "-P" else arg
                for before, arg in zip(("", *args), args, strict=False)
            )
            raise RuntimeError(
                f"{tool} {shown} failed ({result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _krb5_conf_text(self) -> str:
        return "\n".join(
            [
                "[libdefaults]",
                f"    default_realm = {self.realm}",
                "    dns_lookup_kdc = false",
                "    dns_lookup_realm = false",
                "    dns_canonicalize_hostname = false",
                "    rdns = false",
                "    udp_preference_limit = 1",  # TCP: one port to pick free and wait for
                "    ticket_lifetime = 1h",
                "    forwardable = false",
                "",
                "[realms]",
                f"    {self.realm} = {{",
                f"        kdc = {LOOPBACK}:{self.port}",
                "    }",
                "",
                "[domain_realm]",
                f"    localhost = {self.realm}",
                f"    {LOOPBACK} = {self.realm}",
                "",
            ]
        )

    def _kdc_conf_text(self) -> str:
        return "\n".join(
            [
                "[kdcdefaults]",
                f"    kdc_ports = {self.port}",
                f"    kdc_tcp_ports = {self.port}",
                "",
                "[realms]",
                f"    {self.realm} = {{",
                f"        database_name = {self.directory / 'principal'}",
                f"        key_stash_file = {self.directory / 'stash'}",
                f"        acl_file = {self.directory / 'kadm5.acl'}",
                f"        kdc_listen = {LOOPBACK}:{self.port}",
                f"        kdc_tcp_listen = {LOOPBACK}:{self.port}",
                "        supported_enctypes = aes256-cts-hmac-sha1-96:normal "
                "aes128-cts-hmac-sha1-96:normal",
                "    }",
                "",
                "[logging]",
                f"    kdc = FILE:{self.log_path}",
                "",
            ]
        )


def running_kdc(directory: Path) -> Iterator[Kdc]:
    """A started KDC, stopped when the generator closes (the body of the fixture)."""
    kdc = Kdc(directory)
    kdc.start()
    try:
        yield kdc
    finally:
        kdc.stop()


def merged_env(env: Mapping[str, str]) -> dict[str, str]:
    """``os.environ`` with ``env`` on top: for a child process that authenticates."""
    return {**os.environ, **env}
