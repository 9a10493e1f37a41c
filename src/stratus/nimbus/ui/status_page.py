"""The small status page: nimbuses with the leader marked, and pipelines; a banner above
them names every nimbus that serves an unauthenticated API (``nimbus.auth.insecure``).

It is the web UI's page at ``/`` as served (``ui/front.py``), which the UI's script then
takes over: readable without JavaScript."""

from __future__ import annotations

import time
from html import escape

from stratus.api.records import ClusterSummary

_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
    "td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}.leader{font-weight:bold}"
    ".insecure{background:#c00;color:#fff;padding:8px;font-weight:bold}"
)


def render_status_page(summary: ClusterSummary, this_nimbus: str, head: str = "") -> str:
    """The page as HTML; every value from the summary is escaped. ``head`` goes into the
    page's head as it is (the web UI's script and style, which take the page over)."""
    leader = summary.leader.address or "none elected"
    nimbus_rows = "".join(
        _row(
            [
                f"{n.host}:{n.port}"
                + (" (this nimbus)" if f"{n.host}:{n.port}" == this_nimbus else ""),
                "leader" if n.is_leader else "standby",
                f"{n.uptime_secs} s",
                n.version,
            ],
            css="leader" if n.is_leader else "",
        )
        for n in summary.nimbuses
    )
    exposed = [f"{n.host}:{n.port}" for n in summary.nimbuses if n.insecure]
    banner = (
        f"<p class='insecure'>INSECURE: {escape(', '.join(exposed))} serve an unauthenticated "
        "API (nimbus.auth.insecure): anyone who reaches them can run code on every supervisor"
        "</p>"
        if exposed
        else ""
    )
    pipeline_rows = "".join(
        _row(
            [
                p.name,
                p.status.value,
                p.digest[:12],
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(p.submitted)) + " UTC",
                str(p.epoch),
            ]
        )
        for p in summary.pipelines
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>stratus</title>"
        f"<style>{_STYLE}</style>{head}</head><body><div id='status'>"
        f"<h1>stratus</h1>{banner}<p>Leader: <b>{escape(leader)}</b>, "
        f"epoch {escape(str(summary.leader.epoch))}</p>"
        "<h2>Nimbuses</h2><table><tr><th>nimbus</th><th>role</th><th>uptime</th>"
        f"<th>version</th></tr>{nimbus_rows}</table>"
        "<h2>Pipelines</h2><table><tr><th>name</th><th>status</th><th>package</th>"
        f"<th>submitted</th><th>epoch</th></tr>{pipeline_rows}</table>"
        "<p><a href='/api/v1/docs'>API</a> · <a href='/metrics'>metrics</a></p>"
        "</div></body></html>"
    )


def _row(cells: list[str], css: str = "") -> str:
    tds = "".join(f"<td>{escape(cell)}</td>" for cell in cells)
    return f"<tr class='{css}'>{tds}</tr>" if css else f"<tr>{tds}</tr>"
