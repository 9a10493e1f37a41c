"""What every stratus HTTP server shares, so that each is bounded and authenticated alike.

The nimbus API, the supervisor's endpoint and the zkfc's endpoint are uvicorn servers behind
the same pieces: the API's JSON error body (``responses.py``), the caller's role from a
bearer token or a verified client certificate (``authorization.py``,
``peer_certificate.py``), a bound on request bodies (``body_limit.py``), and the bounds on
connections, requests in progress, request heads and TLS handshakes (``bounds.py``).
"""
