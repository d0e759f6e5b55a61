"""Per-link latency and bandwidth (paper App. E.3; dissertation section 5.4.7): the cost of a schedule on
links that differ.

A step of a schedule costs the slowest link it uses: max over used links (w, u) of
alpha_{w,u} + bytes_{w,u} / b_{w,u}, and a schedule costs the sum over its steps
(`cost.heterogeneous_time`). On a uniform fabric every link has alpha and b = B/d, and this is the
alpha-beta model of section 3.2: T = steps * alpha + tau * M/B.

A table is given per arc of a topology. `link_costs_from_json` reads the form the CLI (`fabricplan bfb
--links FILE`) and later the API take::

    {"default": {"alpha_us": 10, "bandwidth_gbps": 25},          optional: arcs not listed
     "links": [{"arc": "0>1", "lane": 0, "alpha_us": 10, "bandwidth_gbps": 12.5}, ...]}

`bandwidth_gbps` is the link's own bandwidth (B/d on a uniform fabric), `lane` picks one of parallel arcs
(all of them when omitted), and a link entry may give only one of the two values (the other is the
default). Every error names the entry and the field (`LinkTableError.loc`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from services.synthesis.schedule.cost import LinkModel, heterogeneous_time
from services.synthesis.schedule.ir import Schedule
from services.synthesis.topology.graph import Topology

__all__ = ["LinkCosts", "LinkTableError", "link_costs_from_json", "MAX_LINK_ENTRIES"]

MAX_LINK_ENTRIES = 1 << 20
_ARC = re.compile(r"^\s*(\d+)\s*>\s*(\d+)\s*$")


class LinkTableError(ValueError):
    """A bad link table: `loc` is where (e.g. ("links", 3, "bandwidth_gbps")), the message says why."""

    def __init__(self, loc: tuple, msg: str):
        self.loc, self.msg = tuple(loc), msg
        where = ".".join(str(x) for x in loc)
        super().__init__(f"{where}: {msg}" if where else msg)


@dataclass(frozen=True)
class LinkCosts:
    """alpha (seconds) and bandwidth (bytes/second) of every arc of `topology`, in arc order."""

    topology: Topology
    alpha_s: np.ndarray
    bandwidth_Bps: np.ndarray

    def __post_init__(self):
        for name in ("alpha_s", "bandwidth_Bps"):
            a = np.asarray(getattr(self, name), dtype=float)
            if a.shape != (self.topology.arcs,):
                raise ValueError(f"{name}: need one value per arc ({self.topology.arcs} arcs), got shape {a.shape}")
            object.__setattr__(self, name, a)
        if not (np.isfinite(self.alpha_s).all() and (self.alpha_s >= 0).all()):
            raise ValueError("alpha_s: latencies must be finite and non-negative")
        if not (np.isfinite(self.bandwidth_Bps).all() and (self.bandwidth_Bps > 0).all()):
            raise ValueError("bandwidth_Bps: bandwidths must be finite and positive")

    @classmethod
    def uniform(cls, topology: Topology, link: LinkModel) -> "LinkCosts":
        """Every link: alpha and b = B/d (d the nominal degree)."""
        return cls(topology, np.full(topology.arcs, link.alpha_s),
                   np.full(topology.arcs, link.node_bandwidth_Bps / topology.degree))

    @property
    def uniform_model(self) -> LinkModel | None:
        """The LinkModel these costs are, when every link is the same; else None."""
        a, b = self.alpha_s, self.bandwidth_Bps
        if (a == a[0]).all() and (b == b[0]).all():
            return LinkModel(float(a[0]), float(b[0]) * self.topology.degree)
        return None

    def time(self, schedule: Schedule, size_bytes: float) -> float:
        """Seconds the schedule takes for M = size_bytes on these links (measured from the schedule)."""
        return heterogeneous_time(schedule, self.topology, self.alpha_s, self.bandwidth_Bps, size_bytes)

    def chunk_cost(self, size_bytes: float, chunks: int) -> np.ndarray:
        """Per arc: the seconds to send one of P = `chunks` chunks of a shard (alpha + (M/(N P)) / b)."""
        return self.alpha_s + size_bytes / self.topology.nodes / chunks / self.bandwidth_Bps

    def transposed(self, gt: Topology) -> "LinkCosts":
        """The same links on G^T: arc (w, u) of G^T is arc (u, w) of G, used the other way."""
        idx = self.topology.arc_index(gt.heads, gt.tails, gt.lanes)
        if (idx < 0).any():
            raise ValueError(f"{gt.expr} is not the transpose of {self.topology.expr}")
        return LinkCosts(gt, self.alpha_s[idx], self.bandwidth_Bps[idx])


def link_costs_from_json(topology: Topology, data, *, default: LinkModel | None = None) -> LinkCosts:
    """Validate a link table (see the module docstring) and expand it to one value per arc.

    Parameters
    ----------
    topology : Topology
    data : dict
        The parsed JSON.
    default : LinkModel, optional
        Used for arcs neither listed nor covered by the table's own "default" (b = B/d).

    Raises
    ------
    LinkTableError
        Not an object, an unknown key, a value that is not a finite number (alpha >= 0, bandwidth > 0), an
        arc or lane the topology lacks, the same link listed twice, or an arc left without a value.

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> g = build("ring(3)")
    >>> c = link_costs_from_json(g, {"default": {"alpha_us": 1, "bandwidth_gbps": 8},
    ...                              "links": [{"arc": "0>1", "bandwidth_gbps": 4}]})
    >>> c.bandwidth_Bps.tolist(), c.alpha_s.tolist()
    ([500000000.0, 1000000000.0, 1000000000.0], [1e-06, 1e-06, 1e-06])
    """
    if not isinstance(data, dict):
        raise LinkTableError((), "a link table is a JSON object with \"links\" (and optionally \"default\")")
    unknown = sorted(set(data) - {"links", "default"})
    if unknown:
        raise LinkTableError((unknown[0],), "unknown key; a link table has \"links\" and \"default\"")
    g = topology
    alpha = np.full(g.arcs, np.nan)
    bw = np.full(g.arcs, np.nan)
    if default is not None:
        alpha[:], bw[:] = default.alpha_s, default.node_bandwidth_Bps / g.degree
    if "default" in data:
        a, b = _values(data["default"], ("default",), required=True)
        alpha[:], bw[:] = a, b
    links = data.get("links", [])
    if not isinstance(links, list):
        raise LinkTableError(("links",), "must be a list of link objects")
    if len(links) > MAX_LINK_ENTRIES:
        raise LinkTableError(("links",), f"{len(links)} entries; at most {MAX_LINK_ENTRIES}")
    seen = np.zeros(g.arcs, dtype=bool)
    for i, entry in enumerate(links):
        loc = ("links", i)
        if not isinstance(entry, dict):
            raise LinkTableError(loc, "each link is an object with \"arc\" and alpha_us and/or bandwidth_gbps")
        extra = sorted(set(entry) - {"arc", "lane", "alpha_us", "bandwidth_gbps"})
        if extra:
            raise LinkTableError(loc + (extra[0],), "unknown key; a link has arc, lane, alpha_us, bandwidth_gbps")
        arcs = _arcs_of(g, entry, loc)
        if seen[arcs].any():
            raise LinkTableError(loc + ("arc",), f"{entry['arc']} is listed more than once")
        seen[arcs] = True
        a, b = _values(entry, loc, required=False)
        if a is not None:
            alpha[arcs] = a
        if b is not None:
            bw[arcs] = b
    missing = np.flatnonzero(np.isnan(alpha) | np.isnan(bw))
    if missing.size:
        k = int(missing[0])
        raise LinkTableError(("links",), f"arc {g.tails[k]}>{g.heads[k]} (lane {g.lanes[k]}) has no "
                                         f"{'alpha_us' if np.isnan(alpha[k]) else 'bandwidth_gbps'}: list it or "
                                         f"give a \"default\"")
    return LinkCosts(g, alpha, bw)


def _number(value, loc: tuple, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LinkTableError(loc, f"must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise LinkTableError(loc, f"must be finite and {'positive' if positive else 'non-negative'}, got {value!r}")
    return x


def _values(obj, loc: tuple, required: bool) -> tuple[float | None, float | None]:
    """(alpha seconds, bandwidth bytes/s) of an object with alpha_us and/or bandwidth_gbps."""
    if not isinstance(obj, dict):
        raise LinkTableError(loc, "must be an object with alpha_us and bandwidth_gbps")
    if required:
        extra = sorted(set(obj) - {"alpha_us", "bandwidth_gbps"})
        if extra:
            raise LinkTableError(loc + (extra[0],), "unknown key; expected alpha_us and bandwidth_gbps")
    for key in ("alpha_us", "bandwidth_gbps"):
        if required and key not in obj:
            raise LinkTableError(loc + (key,), "missing")
    if not required and "alpha_us" not in obj and "bandwidth_gbps" not in obj:
        raise LinkTableError(loc, "give alpha_us, bandwidth_gbps or both")
    a = _number(obj["alpha_us"], loc + ("alpha_us",), positive=False) * 1e-6 if "alpha_us" in obj else None
    b = _number(obj["bandwidth_gbps"], loc + ("bandwidth_gbps",), positive=True) * 1e9 / 8 \
        if "bandwidth_gbps" in obj else None
    return a, b


def _arcs_of(g: Topology, entry: dict, loc: tuple) -> np.ndarray:
    """Arc indices an entry names: one lane, or every parallel arc tail>head."""
    text = entry.get("arc")
    m = _ARC.match(text) if isinstance(text, str) else None
    if m is None:
        raise LinkTableError(loc + ("arc",), f"must be a string \"tail>head\", got {text!r}")
    tail, head = int(m.group(1)), int(m.group(2))
    if tail >= g.nodes or head >= g.nodes:
        raise LinkTableError(loc + ("arc",), f"{text} names a node outside 0..{g.nodes - 1}")
    mult = int(g.multiplicity([tail], [head])[0])
    if mult == 0:
        raise LinkTableError(loc + ("arc",), f"{g.expr} has no arc {tail}>{head}")
    if "lane" not in entry:
        return g.arc_index(np.full(mult, tail), np.full(mult, head), np.arange(mult))
    lane = entry["lane"]
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < mult:
        raise LinkTableError(loc + ("lane",), f"must be an integer in 0..{mult - 1} ({mult} parallel "
                                              f"arc{'s' if mult > 1 else ''} {tail}>{head}), got {lane!r}")
    return g.arc_index([tail], [head], [lane])
