"""The warm workers' memory: what the machine has, what warm workers may use, how many to keep.

Guarantees: a supervisor's warm workers together use at most their budget
(``supervisor.worker.warm.memory.mb``; left unset, a quarter of the machine's memory, the
machine being the supervisor's cgroup where its limit is lower), each counted at its
measured resident memory (its monitor, its Python process and its Spark JVM) once its Spark
is up and at an estimate before; none starts while the machine's available memory, less
that estimate, would fall below a tenth of the machine's memory; and when available memory
falls below that tenth, warm workers go, the newest first, one per measurement (they are
spares: a pipeline needs the memory more). ``plan_warm`` is the pure decision; the pool
(``warm_pool``) measures, asks it, and does what it says::

    machine = read_machine()                        # None where /proc/meminfo is missing
    budget = warm_budget(settings.warm, machine, os.environ)
    plan = plan_warm(WarmInputs(wanted=2, costs=(700 * MIB,), starting=0,
                                budget=budget.bytes, estimate=ESTIMATE_BYTES, machine=machine))
    plan.keep, plan.start, plan.held, plan.why

Standby workers share the budget, first (``plan_spares``): each that asks starts if the
standby workers' use with it stays within the budget and the machine keeps its reserve once
the warm workers gave theirs back; else it is refused with the reason; the warm workers then
plan in what is left::

    spares = plan_spares(SpareInputs(standby=(700 * MIB,), asking=1,
                                     standby_estimate=STANDBY_ESTIMATE_BYTES, warm=inputs))
    spares.admitted, spares.refused, spares.warm
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from stratus.api.records import MIB, WarmHeld

BUDGET_SHARE = 0.25  # the default budget: this share of the machine's memory
RESERVE_SHARE = 0.10  # no warm worker starts if less than this share would stay available
# a ready warm worker before one was measured here: 630-820 MiB resident with local[1]
# (docs/benchmarks.md, "kill, warm starts off and on")
ESTIMATE_BYTES = 768 * MIB
# a standby worker before one was measured here: it grows while it warms up (40 micro-batches
# by default), 773-1091 MiB resident with local[1], about 790 MiB once done
# (docs/benchmarks.md, "the hot row with standby workers warmed up for 40 batches")
STANDBY_ESTIMATE_BYTES = 1024 * MIB
MEASURE_SECS = 2.0  # the machine and the warm workers are measured at most this often
# the default budget in MiB where the configuration sets none: a fleet's (or a test run's)
# way to change the derived default without a configuration file
BUDGET_ENV_VAR = "STRATUS_WARM_MEMORY_MB"
_NO_LIMIT = 1 << 60  # cgroup v1 writes about 2**63 for "no limit"
PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Machine:
    """The memory of the machine, as the supervisor's processes may use it."""

    total: int  # bytes: MemTotal, or the cgroup's limit where lower
    available: int  # bytes: MemAvailable, or the cgroup's room (limit less use) where lower
    cgroup_limit: int | None = None  # bytes: the lowest limit of its cgroup and parents

    @property
    def reserve(self) -> int:
        """What stays available whatever warm workers want."""
        return int(self.total * RESERVE_SHARE)


@dataclass(frozen=True)
class Budget:
    """What the warm workers may use together, and where that figure comes from."""

    bytes: int
    source: str  # for the start's log line

    @property
    def mb(self) -> int:
        return self.bytes // MIB


@dataclass(frozen=True)
class WarmInputs:
    """What one decision looks at."""

    wanted: int  # free slots
    costs: Sequence[int]  # each warm worker alive, oldest first: measured if up, else estimate
    starting: int  # how many of them (and pipelines' workers) have no Spark up yet
    budget: int
    estimate: int  # what a warm worker not measured yet counts for
    machine: Machine | None  # None: unknown (the budget alone decides)


@dataclass(frozen=True)
class WarmPlan:
    """How many warm workers to keep (the oldest), whether to start one, and why fewer than
    wanted, if memory is the reason."""

    keep: int
    start: bool
    held: WarmHeld | None = None
    why: str | None = None


def plan_warm(inputs: WarmInputs) -> WarmPlan:
    """The decision of the module docstring. Starts one at a time: a warm worker starts
    only while no JVM is starting, a warm worker's or a pipeline's (two start-ups at once
    slow both)."""
    costs, budget, machine = list(inputs.costs), inputs.budget, inputs.machine
    keep = min(len(costs), max(0, inputs.wanted))
    held: WarmHeld | None = None
    why: str | None = None
    while keep > 0 and sum(costs[:keep]) > budget:
        keep -= 1
        held, why = WarmHeld.BUDGET, _over_budget(sum(costs[:keep]), costs[keep], budget)
    if machine is not None and keep > 0 and machine.available < machine.reserve:
        keep -= 1
        held, why = WarmHeld.MEMORY_SHORT, _short(machine, 0)
    start = False
    if held is None and keep < inputs.wanted and keep == len(costs):
        used = sum(costs)
        if used + inputs.estimate > budget:
            held, why = WarmHeld.BUDGET, _over_budget(used, inputs.estimate, budget)
        elif machine is not None and machine.available - inputs.estimate < machine.reserve:
            held, why = WarmHeld.MEMORY_SHORT, _short(machine, inputs.estimate)
        else:
            start = inputs.starting == 0
    return WarmPlan(keep, start, held, why)


def _over_budget(used: int, more: int, budget: int) -> str:
    return (
        f"another warm worker ({more // MIB} MiB) would pass the budget: "
        f"{used // MIB} of {budget // MIB} MiB used (supervisor.worker.warm.memory.mb)"
    )


def _short(machine: Machine, more: int, what: str = "a warm worker") -> str:
    needs = f", {what} needs {more // MIB} MiB," if more else ""
    return (
        f"the machine's available memory is short: {machine.available // MIB} MiB available"
        f"{needs} and {machine.reserve // MIB} MiB ({RESERVE_SHARE:.0%} of "
        f"{machine.total // MIB} MiB) stay available"
    )


@dataclass(frozen=True)
class SpareInputs:
    """What the spare budget's decision looks at: the standby workers admitted, those that
    ask, and the warm workers (``warm``: its budget the whole spare budget)."""

    standby: Sequence[int]  # each standby worker admitted: measured if up, else the estimate
    asking: int  # standby workers waiting for memory to start, in their order
    standby_estimate: int  # what a standby worker not measured yet counts for
    warm: WarmInputs


@dataclass(frozen=True)
class SparePlan:
    """How many of the standby workers asking start (the first ones), why the others are
    refused, and the warm workers' plan within what the standby workers leave."""

    admitted: int
    refused: str | None
    warm: WarmPlan


def plan_spares(inputs: SpareInputs) -> SparePlan:
    """Warm and standby workers share one spare budget (``supervisor.worker.warm.memory.mb``),
    standby workers first: one starts if the standby workers' use with it stays within the
    budget and the machine keeps its reserve once the warm workers gave theirs back;
    otherwise it is refused, with the reason. The warm workers then plan (``plan_warm``)
    within what the standby workers leave of the budget and of the machine: the newest
    yield first."""
    warm = inputs.warm
    budget, machine, more = warm.budget, warm.machine, inputs.standby_estimate
    used = sum(inputs.standby)
    freed = sum(warm.costs)  # what the warm workers give back if they must
    admitted, refused = 0, None
    for _ in range(inputs.asking):
        if used + more > budget:
            refused = _spare_over_budget(used, more, budget, len(inputs.standby) + admitted)
            break
        if machine is not None and machine.available + freed - more < machine.reserve:
            refused = _short(machine, more, "a standby worker")
            break
        admitted += 1
        used += more
        if machine is not None:
            machine = replace(machine, available=machine.available - more)
    left = replace(warm, budget=max(0, budget - used), machine=machine)
    return SparePlan(admitted, refused, plan_warm(left))


def _spare_over_budget(used: int, more: int, budget: int, standby: int) -> str:
    workers = f"{standby} standby worker{'' if standby == 1 else 's'}"
    return (
        f"another standby worker ({more // MIB} MiB) would pass the spare budget: "
        f"{used // MIB} of {budget // MIB} MiB used by {workers}, warm workers yielding "
        "(supervisor.worker.warm.memory.mb)"
    )


def warm_budget(
    memory_mb: int | None, machine: Machine | None, environ: Mapping[str, str]
) -> Budget:
    """``memory_mb`` (``supervisor.worker.warm.memory.mb``) when set; else the environment's
    ``STRATUS_WARM_MEMORY_MB``; else ``BUDGET_SHARE`` of the machine's memory (0 when it is
    unknown). ``ValueError`` naming the variable when it is not a whole number >= 0."""
    if memory_mb is not None:
        return Budget(memory_mb * MIB, "supervisor.worker.warm.memory.mb")
    raw = environ.get(BUDGET_ENV_VAR)
    if raw is not None and raw.strip():
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"{BUDGET_ENV_VAR} must be a whole number of MiB >= 0, not {raw!r}")
        return Budget(value * MIB, BUDGET_ENV_VAR)
    if machine is None:
        return Budget(0, "the machine's memory is unknown (no /proc/meminfo)")
    share = f"{BUDGET_SHARE:.0%} of the machine's {machine.total // MIB} MiB"
    if machine.cgroup_limit is not None and machine.cgroup_limit <= machine.total:
        share += " (its cgroup's limit)"
    return Budget(int(machine.total * BUDGET_SHARE), share)


# ---------------------------------------------------------------------------------------------
# Measuring (Linux: /proc and the cgroup file system)


def read_machine(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT) -> Machine | None:
    """The machine's memory now; None where ``/proc/meminfo`` cannot be read."""
    try:
        info = _meminfo(proc / "meminfo")
        total, available = info["MemTotal"], info["MemAvailable"]
    except (OSError, KeyError, ValueError):
        return None
    limit, room = _cgroup(proc / "self" / "cgroup", cgroup_root)
    if limit is not None and limit < total:
        total = limit
    if room is not None:
        available = min(available, room)
    return Machine(total, max(0, available), limit)


def _meminfo(path: Path) -> dict[str, int]:
    values = {}
    for line in path.read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key] = int(parts[0]) * 1024  # kB
    return values


def _cgroup(self_cgroup: Path, root: Path) -> tuple[int | None, int | None]:
    """The lowest memory limit of the process's cgroup and its parents (v2, else v1), and
    the room under it: the limit less the cgroup's use (its inactive file cache left out,
    which the kernel reclaims first). (None, None) without a limit."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: 0::/path
            found = _lowest_limit(root, path, "memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            found = _lowest_limit(
                root / "memory",
                path,
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file",
            )
        else:
            continue
        if found is not None:
            return found
    return None, None


def _lowest_limit(
    mount: Path, path: str, limit_file: str, usage_file: str, inactive_key: str
) -> tuple[int, int | None] | None:
    """Of the cgroup at ``path`` under ``mount`` (or ``mount`` itself, in a cgroup namespace)
    and its parents, the lowest limit and the room under it."""
    directory = mount / path.strip("/")
    if not directory.is_dir():
        directory = mount
    lowest: tuple[int, int | None] | None = None
    for place in (directory, *directory.parents):
        if not place.is_relative_to(mount):
            break
        limit = _read_int(place / limit_file)
        if limit is None or limit >= _NO_LIMIT or (lowest is not None and limit >= lowest[0]):
            continue
        usage = _read_int(place / usage_file)
        inactive = _stat_value(place / "memory.stat", inactive_key)
        room = None if usage is None else limit - max(0, usage - inactive)
        lowest = (limit, room)
    return lowest


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _stat_value(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def groups_rss(groups: Iterable[int], proc: Path = PROC) -> dict[int, int]:
    """The resident memory, in bytes, of every live process of each process group of
    ``groups``, summed per group (one pass over ``/proc``)."""
    wanted = set(groups)
    totals = dict.fromkeys(wanted, 0)
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in proc.glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, group, rss_pages = fields[0], int(fields[2]), int(fields[21])
        if group in wanted and state not in ("Z", "X"):
            totals[group] += rss_pages * page
    return totals
