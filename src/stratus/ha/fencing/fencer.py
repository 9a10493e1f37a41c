"""The ``Fencer``: the configured methods, tried in order until one fences the target."""

from __future__ import annotations

import logging
from collections.abc import Callable

from stratus.ha.fencing.protocol import FenceTarget, FencingContext, MethodSpec
from stratus.ha.fencing.registry import create_method

log = logging.getLogger(__name__)

FenceAttempt = Callable[[str, str], None]  # (method name, "fenced" | "failed" | "error")


class Fencer:
    """The configured methods, tried in order until one fences the target; ``on_attempt``
    hears each method's outcome (the zkfc's metrics count them)."""

    def __init__(
        self,
        specs: list[MethodSpec],
        context: FencingContext,
        on_attempt: FenceAttempt = lambda _method, _result: None,
    ) -> None:
        self.specs = specs
        self._methods = [create_method(spec, context) for spec in specs]
        self._on_attempt = on_attempt

    def fence(self, target: FenceTarget) -> bool:
        for spec, method in zip(self.specs, self._methods, strict=True):
            try:
                fenced = method.fence(target)
            except Exception as exc:
                log.warning("event=fence_error method=%s target=%s error=%s", spec, target, exc)
                self._on_attempt(spec.name, "error")
                continue
            if fenced:
                log.info("event=fenced method=%s target=%s", spec, target.address)
                self._on_attempt(spec.name, "fenced")
                return True
            self._on_attempt(spec.name, "failed")
            log.warning("event=fence_failed method=%s target=%s", spec, target.address)
        log.error("event=fencing_failed target=%s methods=%d", target.address, len(self.specs))
        return False
