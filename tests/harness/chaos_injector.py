"""The chaos suite's fault injector: does one fault of a plan (``stratus.chaos.faults``) to the
real processes and hosts of a ``ChaosCluster``, then undoes it, and records in the driver's
history what the victims cannot say themselves (``process_killed``) and what a client was
told (``submit_acknowledged``)::

    injector = Injector(cluster, client, driver, workload)
    for number, fault in enumerate(plan, 1):
        injector.apply(fault)          # e.g. SIGKILL of h2's nimbus, then its restart

Signals hit the daemon's own process (``ip netns exec`` execs it): SIGKILL and SIGTERM are
followed by a start of the daemon (SIGTERM: once it has stopped by itself, SIGKILL after the
stop timeout), SIGSTOP by SIGCONT after the fault's hold. The streaming pipeline's worker is
found where it runs when the fault is applied; its supervisor starts it again.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from stratus.chaos.faults import CLIENT_ACTIONS, Action, Fault, Target
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.trail import PROCESS_KILLED, SUBMIT_ACKNOWLEDGED, TrailRecorder
from tests.harness.chaos_cluster import HOSTS, ChaosCluster
from tests.harness.spark_packages import batch_package


@dataclass
class Workload:
    """What the clients run: the streaming pipeline, and the batch pipelines they submit
    and kill during the run (``killed``: every kill tried, answered or not)."""

    streaming: str
    streaming_package: bytes
    batch_output: str
    submitted: list[str] = field(default_factory=list)
    killed: set[str] = field(default_factory=set)
    updates: int = 0


class Injector:
    """Applies faults to ``cluster``; see the module docstring."""

    def __init__(
        self,
        cluster: ChaosCluster,
        client: NimbusClient,
        driver: TrailRecorder,
        workload: Workload,
        say: Callable[[str], None] = print,
    ) -> None:
        self._cluster = cluster
        self._client = client
        self._driver = driver
        self._workload = workload
        self._say = say
        self._batch_package = batch_package()
        self._requests: list[threading.Thread] = []
        self._names = itertools.count(1)
        self._lock = threading.Lock()  # the workload's lists, from the requests' threads

    def apply(self, fault: Fault) -> None:
        """Do ``fault`` and undo it; returns once it is undone (the cluster may still be
        recovering: the suite waits for that). A client's request goes on in the background,
        through the faults that follow, until ``finish``."""
        handlers: dict[Action, Callable[[Fault], None]] = {
            Action.KILL: self._kill,
            Action.FREEZE: self._freeze,
            Action.TERMINATE: self._terminate,
            Action.QUORUM_LOSS: self._quorum_loss,
            Action.CUT: self._cut,
            Action.SUBMIT: self._submit,
            Action.KILL_PIPELINE: self._kill_pipeline,
            Action.UPDATE: self._update,
        }
        if fault.action in CLIENT_ACTIONS:
            request = threading.Thread(target=handlers[fault.action], args=(fault,), daemon=True)
            request.start()
            self._requests.append(request)
            return
        handlers[fault.action](fault)

    def finish(self, timeout: float) -> None:
        """Wait for the clients' requests still going (each is bounded by its retries)."""
        deadline = time.monotonic() + timeout
        for request in self._requests:
            request.join(max(0.0, deadline - time.monotonic()))
        going = sum(request.is_alive() for request in self._requests)
        assert going == 0, f"{going} client requests still going after {timeout:g} s"

    # ------------------------------------------------------------------ signals

    def _kill(self, fault: Fault) -> None:
        if fault.target is Target.WORKER:
            self._signal_worker(signal.SIGKILL)
            return
        self._killed(self._cluster.process(fault.target, fault.host).pid)
        self._cluster.process(fault.target, fault.host).signal(signal.SIGKILL)
        self._cluster.restart(fault.target, fault.host)

    def _terminate(self, fault: Fault) -> None:
        if fault.target is Target.WORKER:
            self._signal_worker(signal.SIGTERM)
            return
        process = self._cluster.process(fault.target, fault.host)
        pid = process.pid
        process.signal(signal.SIGTERM)
        self._cluster.restart(fault.target, fault.host)  # waits for the stop first
        self._killed(pid)

    def _freeze(self, fault: Fault) -> None:
        if fault.target is Target.WORKER:
            pid = self._worker_pid()
            if pid is None:
                return
            with _frozen_group(pid):
                time.sleep(fault.hold_secs)  # the fault is the pause itself
            return
        process = self._cluster.process(fault.target, fault.host)
        process.signal(signal.SIGSTOP)
        try:
            time.sleep(fault.hold_secs)
        finally:
            process.signal(signal.SIGCONT)

    def _signal_worker(self, signum: int) -> None:
        pid = self._worker_pid()
        if pid is None:
            return
        if signum == signal.SIGKILL:
            self._killed(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    def _worker_pid(self) -> int | None:
        """The pid of the streaming pipeline's running worker, or None (none runs now)."""
        with contextlib.suppress(StratusError):
            beat = self._client.workers(self._workload.streaming).on_assigned()
            if beat is not None and beat.state.value == "RUNNING" and beat.pid:
                return beat.pid
        self._say("  no running worker to hit")
        return None

    def _killed(self, pid: int | None) -> None:
        if pid is not None:
            self._driver.record(PROCESS_KILLED, of_host=socket.gethostname(), of_pid=pid)

    # ------------------------------------------------------------------ ensemble and network

    def _quorum_loss(self, fault: Fault) -> None:
        stopped = [name for name in HOSTS if name != fault.host]
        for name in stopped:
            self._cluster.zookeepers[name].kill()
        try:
            time.sleep(fault.hold_secs)
        finally:
            for name in stopped:
                self._cluster.zookeepers[name].launch()
            for name in stopped:
                self._cluster.zookeepers[name].wait_serving(60.0)

    def _cut(self, fault: Fault) -> None:
        self._cluster.hosts.cut(fault.host)
        try:
            time.sleep(fault.hold_secs)
        finally:
            self._cluster.hosts.heal(fault.host)

    # ------------------------------------------------------------------ clients

    def _submit(self, fault: Fault) -> None:
        name = f"batch-{next(self._names)}"
        request = f"chaos-{name}"
        conf = {
            "spark.stratus.example.orders": 1000,
            "spark.stratus.example.output": f"{self._workload.batch_output}/{name}",
        }
        with self._lock:
            self._workload.submitted.append(name)
        try:
            self._client.submit(name, self._batch_package, conf, request_id=request)
        except StratusError as exc:
            self._say(f"  submit of {name} not acknowledged: {exc}")
            return
        self._driver.record(SUBMIT_ACKNOWLEDGED, pipeline=name, request_id=request)

    def _kill_pipeline(self, fault: Fault) -> None:
        with self._lock:
            alive = [n for n in self._workload.submitted if n not in self._workload.killed]
            if not alive:
                self._say("  no batch pipeline to kill")
                return
            name = alive[0]
            self._workload.killed.add(name)
        try:
            self._client.kill(name, wait_secs=0)
        except StratusError as exc:
            self._say(f"  kill of {name} not acknowledged: {exc}")

    def _update(self, fault: Fault) -> None:
        with self._lock:
            self._workload.updates += 1
        try:
            self._client.update(self._workload.streaming, self._workload.streaming_package)
        except StratusError as exc:
            self._say(f"  update of {self._workload.streaming} not acknowledged: {exc}")


@contextlib.contextmanager
def _frozen_group(pid: int) -> Iterator[None]:
    """The process group of ``pid`` stopped inside (a worker and its Spark), continued after."""
    try:
        group = os.getpgid(pid)
        os.killpg(group, signal.SIGSTOP)
    except ProcessLookupError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)
