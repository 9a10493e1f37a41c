"""Self-fencing: a zkfc whose ZooKeeper session expired makes its own service stand down.

Once the session is gone, the lock is gone with it and another zkfc may already be making its
service active; this node must not stay active beside it. The stand-down is the graceful
transition-to-standby (timeout, one retry), then the configured methods that stop a process
(``shell``, ``process``, ``sshfence``) aimed at our own service. ``epoch`` never counts here:
it fences writes, not the service::

    fencer = self_fencer(settings.fencing_methods, context)
    fencer.fence(FenceTarget.parse("127.0.0.1:6627"))   # True once it surely is not active
"""

from __future__ import annotations

from stratus.ha.fencing import FenceAttempt, Fencer, FencingContext, MethodSpec

#: The methods that stop the service itself, fit to stand our own service down.
STOPPING_METHODS = ("shell", "process", "sshfence")


def self_fence_methods(methods: list[MethodSpec]) -> list[MethodSpec]:
    """Graceful first, then the configured methods that stop a process, in their order."""
    return [MethodSpec("graceful")] + [spec for spec in methods if spec.name in STOPPING_METHODS]


def self_fencer(
    methods: list[MethodSpec],
    context: FencingContext,
    on_attempt: FenceAttempt = lambda _method, _result: None,
) -> Fencer:
    """The fencer a zkfc turns on its own service when its session expires."""
    return Fencer(self_fence_methods(methods), context, on_attempt)
