"""Who may call a stratus server, and over what: bearer tokens, roles and TLS contexts.

The layers above take small records from here and never parse a credential themselves:
``Credentials`` (the token and role file, only hashes kept), ``Role`` (what a caller may
do) and ``TlsSettings`` (the ``ssl.SSLContext`` of a server or a client). Nothing here does
I/O beyond reading the files it is pointed at::

    creds = load_credentials(Path("/etc/stratus/tokens"))   # TokenFileError names the line
    creds.role_of_token("s3cr3t-...")                       # Role.SUBMIT, or None
    TlsSettings(cert="nimbus.pem", key="nimbus.key", ca="ca.pem").server_context()
"""
