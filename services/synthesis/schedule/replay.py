"""A schedule as per-link transfer groups with their dependencies, and its replay in an outside simulator
(SimGrid), which checks the two times of DESIGN section 2 independently of our own pricing.

`transfer_groups` turns the IR (section 3's tuples) into what a network simulator needs: for every link (arc,
lane) its groups in step order, a group being everything the link carries in one comm step (one message of
alpha_l + bytes / b_l), and for every group the groups it waits for by the model checker's holding rule
(App. B, Definition 4): for each atom its sender forwards, the groups that wrote the sender's copy since its last
COPY (the last COPY's groups of that step and every REDUCE after; `schedule.dependency` prices the same rule).

`simgrid_replay` runs the groups in SimGrid (Debian's `python3-simgrid`, built for /usr/bin/python3, so it runs
`simgrid_runner.py` as a subprocess of that interpreter, fed JSON): one SimGrid link per arc (latency alpha_l,
bandwidth b_l) between two hosts of its own, the flow-level CM02 model with latency and bandwidth factors 1,
TCP-gamma 0 (no window bound) and no cross-traffic, so a message of s bytes takes alpha_l + s / b_l. Mode
"dependency": a link starts its next group when it is free and the groups it waits for have arrived (the time
`time_us`); mode "barrier": every group of a step starts when the previous step has ended everywhere (the
step-synchronous price, `barrier_time_us`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.synthesis.schedule.cost import grid_unit_fraction
from services.synthesis.schedule.dependency import link_ids, locations
from services.synthesis.schedule.ir import Op, Schedule

__all__ = ["TransferGroups", "transfer_groups", "simgrid_available", "simgrid_replay", "SIMGRID_PYTHON",
           "ReplayError"]

SIMGRID_PYTHON = os.environ.get("FABRICPLAN_SIMGRID_PYTHON", "/usr/bin/python3")
RUNNER = Path(__file__).with_name("simgrid_runner.py")
MODES = ("dependency", "barrier")


class ReplayError(RuntimeError):
    """The outside simulator failed or is missing (the message says which and why)."""


@dataclass(frozen=True)
class TransferGroups:
    """Links (tail, head, lane, alpha_s, bandwidth_Bps; one entry per link used) and groups (link, step,
    bytes; sorted by step then link) with their dependencies: group g waits for deps[dep_ptr[g]:dep_ptr[g+1]]."""

    tail: np.ndarray
    head: np.ndarray
    lane: np.ndarray
    alpha_s: np.ndarray
    bandwidth_Bps: np.ndarray
    link: np.ndarray
    step: np.ndarray
    bytes: np.ndarray
    dep_ptr: np.ndarray
    deps: np.ndarray

    @property
    def groups(self) -> int:
        return int(self.link.size)

    def to_json(self, mode: str) -> dict:
        """The runner's input: links [[alpha_s, bandwidth_Bps]], groups [[link, step, bytes, [deps]]]."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        deps = self.deps.tolist()
        ptr = self.dep_ptr.tolist()
        return {"mode": mode,
                "links": [[a, b] for a, b in zip(self.alpha_s.tolist(), self.bandwidth_Bps.tolist())],
                "groups": [[int(l), int(t), float(x), deps[ptr[g]:ptr[g + 1]]]
                           for g, (l, t, x) in enumerate(zip(self.link.tolist(), self.step.tolist(),
                                                             self.bytes.tolist()))]}


def transfer_groups(schedule: Schedule, links, size_bytes: float, degree: int | None = None) -> TransferGroups:
    """The schedule's per-link groups at M = `size_bytes` on `links` (a LinkCosts, or a uniform LinkModel with the
    topology's `degree`), with their dependencies (the module docstring). O(atom-level transfers + dependencies).

    Raises ValueError when a transfer sends data its sender never holds (model-check the schedule first).

    >>> from services.synthesis.schedule.cost import LinkModel
    >>> ring = [((u, (0, 1)), (u, (u + 1) % 3), 1) for u in range(3)]
    >>> ring += [(((u + 2) % 3, (0, 1)), (u, (u + 1) % 3), 2) for u in range(3)]
    >>> tg = transfer_groups(Schedule.from_tuples(Collective.ALLGATHER, 3, ring), LinkModel(1e-6, 3e9), 3e3, 1)
    >>> tg.groups, [tg.deps[tg.dep_ptr[g]:tg.dep_ptr[g + 1]].tolist() for g in range(tg.groups)]
    (6, [[], [], [], [2], [0], [1]])
    """
    link, alpha, bw = link_ids(schedule, links, degree)
    n = schedule.transfers
    step = schedule.step_of.astype(np.int64) if n else np.zeros(0, np.int64)
    # groups: (step, link) in that order
    key = step * (int(link.max()) + 1 if n else 1) + link
    uniq, group_of = np.unique(key, return_inverse=True)
    group_of = group_of.ravel()
    g_count = uniq.size
    g_link = np.zeros(g_count, np.int64)
    g_step = np.zeros(g_count, np.int64)
    g_link[group_of], g_step[group_of] = link, step
    units = np.bincount(group_of, weights=(schedule.hi - schedule.lo).astype(np.float64), minlength=g_count)
    g_bytes = units * (size_bytes * grid_unit_fraction(schedule))
    # links used, renumbered densely in the order of their ids
    used = np.unique(g_link)
    dense = np.full(int(link.max()) + 1 if n else 1, -1, np.int64)
    dense[used] = np.arange(used.size)
    first = np.zeros(used.size, np.int64)
    first[dense[link[::-1]]] = np.arange(n)[::-1]                   # a transfer of each link (its first)
    deps = _dependencies(schedule, group_of, g_count)
    ptr = np.zeros(g_count + 1, np.int64)
    np.cumsum([len(d) for d in deps], out=ptr[1:])
    flat = np.fromiter((x for d in deps for x in sorted(d)), dtype=np.int64, count=int(ptr[-1]))
    return TransferGroups(schedule.sender[first].astype(np.int64), schedule.receiver[first].astype(np.int64),
                          schedule.lane[first].astype(np.int64), np.asarray(alpha, float)[used],
                          np.asarray(bw, float)[used], dense[g_link], g_step, g_bytes, ptr, flat)


def _dependencies(s: Schedule, group_of: np.ndarray, g_count: int) -> list[set]:
    """Per group, the groups whose arrival completes the data its transfers read (last-writer rule)."""
    e_ptr, rcell, wcell, init = locations(s)
    writers: list[list[int] | None] = [[] if x == 0.0 else None for x in init.tolist()]
    stamp = [-1] * len(writers)
    deps: list[set] = [set() for _ in range(g_count)]
    e_ptr, rcell, wcell, group = e_ptr.tolist(), rcell.tolist(), wcell.tolist(), group_of.tolist()
    for t in range(1, s.steps + 1):
        sl = s.step_slice(t)
        for i in range(sl.start, sl.stop):
            d = deps[group[i]]
            for e in range(e_ptr[i], e_ptr[i + 1]):
                w = writers[rcell[e]]
                if w is None:
                    raise ValueError(f"transfer {i} sends data its sender never holds: the schedule does not pass "
                                     f"the model checker (verify it first)")
                d.update(w)
        copy = s.ops[t - 1] == Op.COPY
        for i in range(sl.start, sl.stop):
            g = group[i]
            for e in range(e_ptr[i], e_ptr[i + 1]):
                c = wcell[e]
                if copy and stamp[c] != t:
                    writers[c] = [g]
                elif writers[c] is None:
                    writers[c] = [g]
                else:
                    writers[c].append(g)
                stamp[c] = t
    return deps


def simgrid_available() -> str | None:
    """None when SimGrid's Python module can be imported by SIMGRID_PYTHON, else the reason it cannot."""
    if shutil.which(SIMGRID_PYTHON) is None:
        return f"{SIMGRID_PYTHON} not found (SimGrid's module is built for Debian's python3)"
    try:
        r = subprocess.run([SIMGRID_PYTHON, "-c", "import simgrid"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{SIMGRID_PYTHON} -c 'import simgrid' failed: {exc}"
    if r.returncode != 0:
        return (f"SimGrid's Python module is not installed for {SIMGRID_PYTHON} "
                f"(apt-get install -y python3-simgrid): {r.stderr.strip().splitlines()[-1:]}")
    return None


def simgrid_replay(groups: TransferGroups, mode: str, *, timeout_s: float = 600.0) -> float:
    """Seconds SimGrid takes to run `groups` in `mode` ("dependency" or "barrier"; the module docstring)."""
    payload = json.dumps(groups.to_json(mode))
    try:
        r = subprocess.run([SIMGRID_PYTHON, str(RUNNER)], input=payload, capture_output=True, text=True,
                           timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplayError(f"SimGrid replay did not finish: {exc}") from None
    if r.returncode != 0:
        raise ReplayError(f"SimGrid replay failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    lines = r.stdout.strip().splitlines()
    if not lines:
        raise ReplayError(f"SimGrid replay printed nothing: {r.stderr.strip()[-2000:]}")
    return float(json.loads(lines[-1])["time_s"])
