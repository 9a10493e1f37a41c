"""Moving package bytes between nimbuses (and to supervisors), checked against their record.

Serving: ``serve`` decides what to answer to ``GET /api/v1/code/<digest>`` (``ranges`` reads
the ``Range`` header); ``server`` is the package server that sends it with ``sendfile``, and
``nimbus/http/code_routes.py`` the API route over the same decision. Fetching: ``fetch`` is the
entry point (``fetch_package``); ``plan`` splits a download into ranges and holders,
``stream`` fetches from one holder and resumes, ``parts`` from several at once, ``client``
and ``splice`` move the bytes from the socket into the file, and ``check`` says whether a
copy is the package (BLAKE3 when the record has one, else sha256).
"""
