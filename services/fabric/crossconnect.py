"""Per-panel cross-connect configs and the diff a panel agent applies.

A cross-connect is {"ingress": a, "egress": b} on one panel: light entering panel port a (a host's tx
fiber) leaves at panel port b (a host's rx fiber). Configs built here carry the arc, hosts and host
ports each connection realises; the physical content (the sorted (ingress, egress) pairs) has a stable
sha256 `digest` the service can use to decide whether a new config version is needed (and as ETag).

Diff semantics (both Polatis and Telescent are stateful; apply `remove` first, then `add`):
- unchanged: in the current state and desired;
- add: desired, not current;
- remove: current, not desired (unless kept, below);
- kept: current connections that are not desired but may stay because neither of their ports is
  needed by the desired state and the caller says they are idle (e.g. both ends belong to hosts no
  active plan holds). Leaving them saves robot moves on patch panels; the state stays isolated.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .model import Fabric, FabricError


class ConfigError(FabricError):
    """Conflicting or malformed cross-connect lists."""


def _pair(c) -> tuple[int, int]:
    if isinstance(c, dict):
        try:
            return int(c["ingress"]), int(c["egress"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"a cross-connect needs integer 'ingress' and 'egress', got {c!r}") from None
    try:
        a, b = c
        return int(a), int(b)
    except (TypeError, ValueError):
        raise ConfigError(f"a cross-connect is (ingress, egress) or a dict with those keys, got {c!r}") from None


def _index(conns: Iterable, what: str, panel: str | None, ports: int | None = None) -> dict[tuple[int, int], dict]:
    """(ingress, egress) -> the entry as a dict; checks no ingress / egress is used twice."""
    where = f"panel {panel!r} " if panel is not None else ""
    out: dict[tuple[int, int], dict] = {}
    ing: dict[int, tuple[int, int]] = {}
    eg: dict[int, tuple[int, int]] = {}
    for c in conns:
        p = _pair(c)
        if ports is not None and not (0 <= p[0] < ports and 0 <= p[1] < ports):
            raise ConfigError(f"{where}{what}: cross-connect {p[0]}->{p[1]} outside ports 0..{ports - 1}")
        if p[0] in ing:
            raise ConfigError(f"{where}{what}: ingress {p[0]} is connected twice ({ing[p[0]][1]} and {p[1]})")
        if p[1] in eg:
            raise ConfigError(f"{where}{what}: egress {p[1]} is connected twice ({eg[p[1]][0]} and {p[0]})")
        ing[p[0]], eg[p[1]] = p, p
        out[p] = dict(c) if isinstance(c, dict) else {"ingress": p[0], "egress": p[1]}
    return out


def config_digest(conns: Iterable) -> str:
    """sha256 of the sorted physical (ingress, egress) pairs: equal iff the panel state is equal."""
    pairs = sorted(_pair(c) for c in conns)
    return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode()).hexdigest()


def panel_configs(fabric: Fabric, assignments: Iterable, panels: Iterable[str] | None = None) -> dict[str, dict]:
    """Desired config of each panel (all fabric panels unless `panels` is given) for a set of
    assignments (`Assignment` objects or their dicts), as
    {"panel": id, "kind": ..., "ports": ..., "digest": sha256, "cross_connects": [...sorted by ingress]}.
    Raises ConfigError if two assignments claim the same panel port (overlapping hosts)."""
    from .assign import Assignment

    wanted = [p.id for p in fabric.panels] if panels is None else list(panels)
    for pid in wanted:
        fabric.panel(pid)
    merged: dict[str, list[dict]] = {pid: [] for pid in wanted}
    for a in assignments:
        if isinstance(a, dict):
            a = Assignment.from_dict(a)
        if a.fabric_id != fabric.id:
            raise ConfigError(f"assignment of plan {a.plan_id!r} is for fabric {a.fabric_id!r}, not {fabric.id!r}")
        for pid, conns in a.cross_connects().items():
            if pid in merged:
                merged[pid].extend(conns)
    out = {}
    for pid in wanted:
        panel = fabric.panel(pid)
        conns = sorted(merged[pid], key=lambda c: c["ingress"])
        _index(conns, "desired config", pid, panel.ports)       # conflict check
        out[pid] = {"panel": pid, "kind": panel.kind, "ports": panel.ports, "digest": config_digest(conns),
                    "cross_connects": conns}
    return out


@dataclass
class PanelDiff:
    panel: str | None
    remove: list[dict] = field(default_factory=list)
    add: list[dict] = field(default_factory=list)
    unchanged: list[dict] = field(default_factory=list)
    kept: list[dict] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return len(self.remove) + len(self.add)

    def to_dict(self) -> dict:
        return {"panel": self.panel, "changes": self.changes, "remove": self.remove, "add": self.add,
                "unchanged": self.unchanged, "kept": self.kept}


def diff_connections(current: Iterable, desired: Iterable, *, panel: str | None = None,
                     ports: int | None = None,
                     idle: Callable[[int, int], bool] | None = None) -> PanelDiff:
    """Minimal change from `current` to `desired` (each an iterable of (ingress, egress) pairs or dicts
    with those keys; `desired` entries keep their annotations in `add` / `unchanged`).

    `idle(ingress, egress)`: when given, a stale connection whose ports are both free in `desired` and
    for which idle(...) is true is listed in `kept` instead of `remove`. Without it the panel is driven
    to exactly `desired`. Lists are sorted by (ingress, egress)."""
    cur = _index(current, "current state", panel, ports)
    want = _index(desired, "desired config", panel, ports)
    want_in = {p[0] for p in want}
    want_eg = {p[1] for p in want}
    diff = PanelDiff(panel)
    for p in sorted(cur):
        if p in want:
            diff.unchanged.append(want[p])
        elif idle is not None and p[0] not in want_in and p[1] not in want_eg and idle(*p):
            diff.kept.append({"ingress": p[0], "egress": p[1]})
        else:
            diff.remove.append({"ingress": p[0], "egress": p[1]})
    diff.add = [want[p] for p in sorted(want) if p not in cur]
    return diff
