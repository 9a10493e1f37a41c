"""The chaos suite's fault injector: does one fault of a plan (``stratus.chaos.faults``) to the
real processes and hosts of a ``ChaosCluster``, then undoes it, and records in the driver's
history what the victims cannot say themselves (``process_killed``, ``process_paused``,
``host_cut``, ``host_stressed``: each names the supervisor of the host hit, for the oracle's
``check_promotions_explained``) and what a client was told (``submit_acknowledged``)::

    injector = Injector(cluster, client, driver, workload)
    for number, fault in enumerate(plan, 1):
        injector.apply(fault)          # e.g. SIGKILL of h2's nimbus, then its restart

Signals hit the daemon's own process (``ip netns exec`` execs it): SIGKILL and SIGTERM are
followed by a start of the daemon (SIGTERM: once it has stopped by itself, SIGKILL after the
stop timeout), SIGSTOP (a freeze, a pause) by SIGCONT after the fault's hold, whatever happens
meanwhile (``stopped``). The streaming pipeline's worker is found where it runs when the fault
is applied, and so is the beat agent of its supervisor (in a cluster running the pipeline hot);
their supervisor starts them again. A stress runs CPU burners and direct writes to the host's
data directory (``stressed``), in process groups of their own, SIGKILLed at its end; the
scenarios that judge the failure detector stress every host at once for as long as they run
their pauses (``stressing``)::

    with injector.stressing(HOSTS, hold_secs=600):
        for fault in pauses:
            injector.apply(fault)      # e.g. SIGSTOP of the beat agent for 0.61 s, then SIGCONT
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratus.api.standby_workers import StandbyWorkerState
from stratus.chaos.faults import CLIENT_ACTIONS, WHERE_IT_RUNS, Action, Fault, Target
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.process import KILL_WAIT_SECS, ProcessGroup, live_in_group
from stratus.trail import (
    HOST_CUT,
    HOST_STRESSED,
    PROCESS_KILLED,
    PROCESS_PAUSED,
    SUBMIT_ACKNOWLEDGED,
    TrailRecorder,
)
from tests.harness.chaos_cluster import HOSTS, ChaosCluster
from tests.harness.spark_packages import batch_package, example_package
from tests.harness.zkfixtures import wait_until

STRESS_FILE = "chaos-stress.io"  # what a stress writes in the host's data directory
STRESS_WRITE_MIB = 64  # each dd of a stress writes this much, bypassing the page cache
# Burners left behind by a driver that died quit by themselves this long after their hold.
STRESS_BACKSTOP_SECS = 30.0


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


STREAMING = "streaming-counts"  # the streaming example's name


def submit_streaming(
    cluster: ChaosCluster,
    client: NimbusClient,
    driver: TrailRecorder,
    *,
    request_id: str,
    conf: dict[str, Any] | None = None,
) -> Workload:
    """Submit the streaming example on the cluster's shared directory, with ``conf`` beside
    its input and output; the acknowledgement on the driver's trail. The clients' workload."""
    package = example_package("streaming")
    settings = {
        "spark.stratus.example.input": str(cluster.shared / "input"),
        "spark.stratus.example.output": str(cluster.shared / "output"),
        **(conf or {}),
    }
    (cluster.shared / "input").mkdir(parents=True, exist_ok=True)
    client.submit(STREAMING, package, settings, request_id=request_id)
    driver.record(SUBMIT_ACKNOWLEDGED, pipeline=STREAMING, request_id=request_id)
    return Workload(STREAMING, package, str(cluster.shared / "batch"))


def standby_ready(client: NimbusClient, pipeline: str = STREAMING) -> str | None:
    """The supervisor of ``pipeline``'s worker while it runs and its standby worker is READY
    on another supervisor (a hot pipeline that a failure of that supervisor would promote);
    None otherwise, or while no leader answers."""
    try:
        workers = client.workers(pipeline)
    except StratusError:
        return None
    beat, standby = workers.on_assigned(), workers.standby_worker
    if beat is None or beat.state.value != "RUNNING" or standby is None:
        return None
    if standby.state is not StandbyWorkerState.READY or standby.supervisor == beat.supervisor:
        return None
    return beat.supervisor


def wait_standby_ready(client: NimbusClient, timeout: float, pipeline: str = STREAMING) -> str:
    """Wait until ``pipeline``'s worker runs and its standby worker is READY on another
    supervisor (``standby_ready``); that worker's supervisor."""
    found: list[str] = []

    def ready() -> bool:
        active = standby_ready(client, pipeline)
        found[:] = [active] if active is not None else []
        return active is not None

    wait_until(ready, timeout, f"the worker of {pipeline} RUNNING and its standby worker READY")
    return found[0]


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
            Action.FREEZE: self._pause,  # a freeze is a pause past the session timeout
            Action.PAUSE: self._pause,
            Action.TERMINATE: self._terminate,
            Action.QUORUM_LOSS: self._quorum_loss,
            Action.CUT: self._cut,
            Action.STRESS: self._stress,
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
        if fault.target in WHERE_IT_RUNS:
            self._signal_where_it_runs(fault.target, signal.SIGKILL)
            return
        self._signal_and_restart(fault, signal.SIGKILL)

    def _terminate(self, fault: Fault) -> None:
        if fault.target in WHERE_IT_RUNS:
            self._signal_where_it_runs(fault.target, signal.SIGTERM)
            return
        self._signal_and_restart(fault, signal.SIGTERM)

    def _signal_and_restart(self, fault: Fault, signum: int) -> None:
        """Signal the fault's daemon and start it again (after a SIGTERM, once it stopped);
        recorded once it runs again, with when the signal was sent and how long the daemon
        was down: its supervisor may fall silent at any time in between (its beat agent stops
        once the supervisor's lease has ended), which the oracle's (f) counts as the fault's."""
        process = self._cluster.process(fault.target, fault.host)
        pid = process.pid
        began_wall, began_mono = self._driver.now()
        process.signal(signum)
        self._cluster.restart(fault.target, fault.host)  # waits for the stop first
        if pid is not None:
            victim = self._victim(fault.target, pid, fault.host)
            self._driver.record(PROCESS_KILLED, **victim, **self._span(began_wall, began_mono))

    def _pause(self, fault: Fault) -> None:
        """SIGSTOP for the fault's hold, then SIGCONT (a worker: its whole process group,
        Spark included); recorded once continued, with how long it was stopped."""
        victim = (
            self._where_it_runs(fault.target)
            if fault.target in WHERE_IT_RUNS
            else self._daemon(fault)
        )
        if victim is None:
            return
        pid, supervisor = victim
        began_wall, began_mono = self._driver.now()
        with stopped(pid, group=fault.target is Target.WORKER) as done:
            time.sleep(fault.hold_secs)  # the fault is the pause itself
        if done:
            self._driver.record(
                PROCESS_PAUSED,
                **self._victim(fault.target, pid, supervisor),
                **self._span(began_wall, began_mono),
            )

    def _signal_where_it_runs(self, target: Target, signum: int) -> None:
        """Signal the streaming pipeline's worker, or its supervisor's beat agent, where it
        runs now; its supervisor starts it again."""
        victim = self._where_it_runs(target)
        if victim is None:
            return
        pid, supervisor = victim
        if signum == signal.SIGKILL:
            # the worker's pipeline too: a killed worker writes no line of its own
            pipeline = {"pipeline": self._workload.streaming} if target is Target.WORKER else {}
            self._driver.record(PROCESS_KILLED, **self._victim(target, pid, supervisor), **pipeline)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    def _where_it_runs(self, target: Target) -> tuple[int, str] | None:
        """The pid of the streaming pipeline's running worker (``target`` worker) or of its
        supervisor's beat agent (``beat_agent``), and that supervisor; None if none runs."""
        worker = self._worker()
        if worker is None or target is Target.WORKER:
            return worker
        supervisor = worker[1]
        agent = self._cluster.beat_agent(supervisor)
        if agent is None:
            self._say(f"  no beat agent on {supervisor} to hit")
            return None
        return agent, supervisor

    def _worker(self) -> tuple[int, str] | None:
        """The pid of the streaming pipeline's running worker and its supervisor, or None
        (none runs now)."""
        with contextlib.suppress(StratusError):
            beat = self._client.workers(self._workload.streaming).on_assigned()
            if beat is not None and beat.state.value == "RUNNING" and beat.pid:
                return beat.pid, beat.supervisor
        self._say("  no running worker to hit")
        return None

    def _daemon(self, fault: Fault) -> tuple[int, str] | None:
        """The pid of the fault's daemon and its host's supervisor, or None (it is not running)."""
        pid = self._cluster.process(fault.target, fault.host).pid
        if pid is None:
            self._say(f"  no {fault.target.value} on {fault.host} to hit")
            return None
        return pid, fault.host

    def _victim(self, target: Target, pid: int, supervisor: str) -> dict[str, Any]:
        """The fields naming a fault's victim: its process, its kind, and the supervisor of
        its host (whose id is the host's name in this cluster), by which the oracle explains
        a promotion off that supervisor."""
        return {
            "of_host": socket.gethostname(),
            "of_pid": pid,
            "target": target.value,
            "supervisor": supervisor,
        }

    def _span(self, began_wall: float, began_mono: float) -> dict[str, float]:
        """The fields of a fault undone now that began then: when, and for how long."""
        _, now = self._driver.now()
        return {"secs": now - began_mono, "began_wall": began_wall, "began_mono": began_mono}

    # ------------------------------------------------------------------ ensemble and network

    def _quorum_loss(self, fault: Fault) -> None:
        down = [name for name in HOSTS if name != fault.host]
        for name in down:
            self._cluster.zookeepers[name].kill()
        try:
            time.sleep(fault.hold_secs)
        finally:
            for name in down:
                self._cluster.zookeepers[name].launch()
            for name in down:
                self._cluster.zookeepers[name].wait_serving(60.0)

    def _cut(self, fault: Fault) -> None:
        began_wall, began_mono = self._driver.now()
        self._cluster.hosts.cut(fault.host)
        try:
            time.sleep(fault.hold_secs)
        finally:
            self._cluster.hosts.heal(fault.host)
        self._driver.record(HOST_CUT, supervisor=fault.host, **self._span(began_wall, began_mono))

    def _stress(self, fault: Fault) -> None:
        """CPU burners and direct writes to the data directory of the host's supervisor for
        the fault's hold, on the host; recorded once they are gone."""
        with self.stressing([fault.host], fault.hold_secs):
            time.sleep(fault.hold_secs)

    @contextlib.contextmanager
    def stressing(self, hosts: Sequence[str], hold_secs: float) -> Iterator[list[Burners]]:
        """``hosts`` stressed at once inside (``stressed``, on each host, in the data directory
        of its supervisor; their burners quit by themselves ``STRESS_BACKSTOP_SECS`` after
        ``hold_secs``, should the driver die); each host's stress recorded once its burners
        are gone (``host_stressed``)."""
        began_wall, began_mono = self._driver.now()
        with contextlib.ExitStack() as stack:
            burners = [
                stack.enter_context(
                    stressed(
                        self._cluster.nodes.supervisors[host].local_dir,
                        hold_secs,
                        prefix=self._cluster.hosts[host].command,
                    )
                )
                for host in hosts
            ]
            yield burners
        span = self._span(began_wall, began_mono)
        for host, burner in zip(hosts, burners, strict=True):
            self._driver.record(
                HOST_STRESSED, supervisor=host, burners=burner.count, cpu=burner.kind, **span
            )

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
def stopped(pid: int, *, group: bool = False) -> Iterator[bool]:
    """Process ``pid`` (with ``group``: its whole process group, a worker and its Spark)
    stopped inside and continued after, whatever happens inside: a fault never leaves a
    process stopped. Yields whether it was stopped (False: it was gone already)."""
    send = os.killpg if group else os.kill
    try:
        target = os.getpgid(pid) if group else pid
        send(target, signal.SIGSTOP)
    except ProcessLookupError:
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(ProcessLookupError):
            send(target, signal.SIGCONT)


@dataclass(frozen=True)
class Burners:
    """What a stress runs: the CPU burners' process group and the writers', how many CPU
    burners and of which kind (``stress-ng``, else ``python``), the file the writers write."""

    cpu: ProcessGroup
    io: ProcessGroup
    count: int
    kind: str
    io_file: Path

    @property
    def groups(self) -> tuple[int, int]:
        return self.cpu.pid, self.io.pid


@contextlib.contextmanager
def stressed(
    directory: Path, hold_secs: float, *, prefix: Sequence[str] = (), cores: int | None = None
) -> Iterator[Burners]:
    """A host's CPU and disk loaded inside: one CPU burner per core (``stress-ng`` where it is
    installed, else a spinning Python), and ``dd oflag=direct`` writing ``STRESS_WRITE_MIB``
    MiB to ``directory`` again and again, each run with the command ``prefix`` (a host's
    ``ip netns exec``). Both are process groups of their own, SIGKILLed on the way out
    whatever happens inside, and awaited until none of their processes lives; the file is
    removed. Each burner also quits by itself ``STRESS_BACKSTOP_SECS`` after ``hold_secs``,
    should the driver die without a word."""
    count = cores or os.cpu_count() or 1
    quit_secs = round(hold_secs + STRESS_BACKSTOP_SECS)
    io_file = directory / STRESS_FILE
    stress_ng = shutil.which("stress-ng")
    if stress_ng:  # the group's leader: its stressors stay in its group
        cpu_argv = [stress_ng, "--cpu", str(count), "--timeout", f"{quit_secs}s", "--quiet"]
    else:
        spin = (
            f"import time\nend = time.monotonic() + {quit_secs}\nwhile time.monotonic() < end: pass"
        )
        spinner = f"{shlex.quote(sys.executable)} -c {shlex.quote(spin)} &"
        cpu_argv = ["/bin/sh", "-c", " ".join([spinner] * count + ["wait"])]
    write = (
        f"dd if=/dev/zero of={shlex.quote(str(io_file))} bs=1M count={STRESS_WRITE_MIB} "
        "oflag=direct 2>/dev/null || sleep 0.1"
    )
    io_loop = (
        f'end=$(($(date +%s) + {quit_secs})); while [ "$(date +%s)" -lt "$end" ]; do {write}; done'
    )
    quiet: dict[str, Any] = {
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
    }
    groups: list[ProcessGroup] = []
    try:
        groups.append(ProcessGroup.start([*prefix, *cpu_argv], **quiet))
        groups.append(ProcessGroup.start([*prefix, "/bin/sh", "-c", io_loop], **quiet))
        yield Burners(groups[0], groups[1], count, "stress-ng" if stress_ng else "python", io_file)
    finally:
        for group in groups:
            group.kill()
        wait_until(
            lambda: not any(live_in_group(group.pid) for group in groups),
            KILL_WAIT_SECS,
            "the stress's burners to be gone",
        )
        io_file.unlink(missing_ok=True)
