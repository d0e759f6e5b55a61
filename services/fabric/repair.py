"""Re-patching around failed ports (TopoOpt section 7: "in case of permanent failures, TopoOpt
reconfigures to swap ports and recover the failed connection").

A failed cross-connect or panel port takes one arc of a plan's topology down. When the hosts at both ends
have spare ports - host ports the plan's assignment does not use, whose fibers land on healthy panel
ports - and a spare tx port of the tail and a spare rx port of the head land on the same panel (or OCS),
the arc can be wired again there: one new cross-connect, the topology unchanged. `repatch` moves every arc
that uses a faulty port this way and leaves every other arc where it is (the fewest robot moves on a patch
panel). Choosing a panel per moved arc under the per-(host, panel) spare-port counts is the assignment's
integer program (`assign._ilp`) on the moved arcs only; ports on a panel are then handed out in ascending
order, and the result is re-checked against the fabric (`Assignment.check`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .assign import Assignment, AssignmentError, _ilp
from .model import Fabric

__all__ = ["RepairError", "Repatch", "arcs_on_faults", "repatch"]


class RepairError(AssignmentError):
    """No spare ports to wire a failed arc again (the message names the arc and what its hosts have)."""


@dataclass
class Repatch:
    """The repaired assignment, the arcs moved (with their old and new ports) and the panels touched."""

    assignment: Assignment
    moves: list[dict]

    @property
    def panels(self) -> list[str]:
        return sorted({m["before"]["panel"] for m in self.moves} | {m["after"]["panel"] for m in self.moves})


def arcs_on_faults(assignment: Assignment, faults) -> np.ndarray:
    """Indices of the arcs whose tx fiber lands on a faulty ingress or whose rx fiber on a faulty egress.
    `faults`: (panel, "ingress" | "egress", port) triples."""
    bad_in = {(p, port) for p, side, port in faults if side == "ingress"}
    bad_eg = {(p, port) for p, side, port in faults if side == "egress"}
    hit = [a for a in range(assignment.arcs)
           if (assignment.panel[a], int(assignment.ingress[a])) in bad_in
           or (assignment.panel[a], int(assignment.egress[a])) in bad_eg]
    return np.asarray(hit, dtype=np.int64)


def _where(a: Assignment, arc: int, tx: int, rx: int, panel: str, ingress: int, egress: int) -> dict:
    return {"panel": panel, "ingress": int(ingress), "egress": int(egress), "tx_host": a.hosts[a.tails[arc]],
            "tx_port": int(tx), "rx_host": a.hosts[a.heads[arc]], "rx_port": int(rx)}


def repatch(fabric: Fabric, assignment: Assignment, faults, *, time_limit_s: float = 10.0) -> Repatch:
    """Move the arcs of `assignment` that use a faulty panel port onto spare ports of the same hosts.

    Parameters
    ----------
    fabric : Fabric
        The fabric as the assignment sees it (`Fabric.side(s)` for a plan on the look-ahead side).
    assignment : Assignment
    faults : iterable of (panel, "ingress" | "egress", port)
        Panel ports known to be faulty; a failed cross-connect makes both its ports faulty.
    time_limit_s : float
        For the integer program choosing the panels.

    Returns
    -------
    Repatch
        With no arc on a faulty port, the assignment unchanged and no moves.

    Raises
    ------
    RepairError
        A moved arc has no panel with a spare tx port of its tail and a spare rx port of its head, or the spare
        ports cannot serve every moved arc at once.

    Examples
    --------
    >>> from services.fabric import assign_ports, shared_panel_fabric
    >>> from services.synthesis.topology.catalog import build
    >>> fab = shared_panel_fabric(4, 3, kind="ocs")              # 3 ports per host, the ring uses 2
    >>> a = assign_ports(fab, ["h0", "h1", "h2", "h3"], build("biring(4)"))
    >>> r = repatch(fab, a, [("panel0", "ingress", int(a.ingress[0]))])
    >>> [(m["arc"], m["before"]["tx_port"], m["after"]["tx_port"]) for m in r.moves]
    [(0, 0, 2)]
    """
    faults = {(str(p), str(side), int(port)) for p, side, port in faults}
    move = arcs_on_faults(assignment, faults)
    if move.size == 0:
        return Repatch(assignment, [])
    a = assignment
    N, D, P = a.nodes, fabric.ports_per_host, len(fabric.panels)
    hidx = np.array([fabric.host_index[h] for h in a.hosts], dtype=np.int64)
    keep = np.ones(a.arcs, dtype=bool)
    keep[move] = False
    used_tx = np.zeros((N, D), dtype=bool)
    used_rx = np.zeros((N, D), dtype=bool)
    used_tx[a.tails[keep], a.tx_port[keep]] = True
    used_rx[a.heads[keep], a.rx_port[keep]] = True
    panel_ids = [p.id for p in fabric.panels]
    bad_tx = np.array([[(panel_ids[fabric.tx_panel[h, k]], "ingress", int(fabric.tx_port[h, k])) in faults
                        for k in range(D)] for h in hidx], dtype=bool).reshape(N, D)
    bad_rx = np.array([[(panel_ids[fabric.rx_panel[h, k]], "egress", int(fabric.rx_port[h, k])) in faults
                        for k in range(D)] for h in hidx], dtype=bool).reshape(N, D)
    free_tx = ~used_tx & ~bad_tx
    free_rx = ~used_rx & ~bad_rx
    tx_cap = np.zeros((N, P), dtype=np.int64)
    rx_cap = np.zeros((N, P), dtype=np.int64)
    for u in range(N):
        np.add.at(tx_cap[u], fabric.tx_panel[hidx[u]][free_tx[u]], 1)
        np.add.at(rx_cap[u], fabric.rx_panel[hidx[u]][free_rx[u]], 1)
    tails, heads = a.tails[move].astype(np.int64), a.heads[move].astype(np.int64)
    stuck = []                  # every arc that cannot be re-patched, each with what its hosts have
    for i, arc in enumerate(move.tolist()):
        if not ((tx_cap[tails[i]] > 0) & (rx_cap[heads[i]] > 0)).any():
            u, v = a.hosts[tails[i]], a.hosts[heads[i]]
            spare = lambda cap, x: ", ".join(f"{panel_ids[p]} ({int(cap[x, p])})"  # noqa: E731
                                             for p in np.flatnonzero(cap[x])) or "none"
            stuck.append(f"arc {tails[i]}>{heads[i]} (host {u!r} -> host {v!r}) cannot be re-patched: no panel "
                         f"has a spare tx port of {u!r} and a spare rx port of {v!r} (spare tx of {u!r}: "
                         f"{spare(tx_cap, tails[i])}; spare rx of {v!r}: {spare(rx_cap, heads[i])})")
    if stuck:
        raise RepairError("; ".join(stuck))
    try:
        panel_of = _ilp(fabric, a.hosts, tails, heads, tx_cap, rx_cap, time_limit_s, a.expr)
    except AssignmentError as exc:
        raise RepairError(f"the spare ports cannot serve all {move.size} failed arcs at once: {exc}") from None
    tx_port, rx_port = a.tx_port.copy(), a.rx_port.copy()
    ingress, egress, panel = a.ingress.copy(), a.egress.copy(), list(a.panel)
    moves = []
    for i, arc in enumerate(move.tolist()):
        u, v, p = tails[i], heads[i], int(panel_of[i])
        k = int(np.flatnonzero(free_tx[u] & (fabric.tx_panel[hidx[u]] == p))[0])
        m = int(np.flatnonzero(free_rx[v] & (fabric.rx_panel[hidx[v]] == p))[0])
        free_tx[u, k] = free_rx[v, m] = False
        before = _where(a, arc, tx_port[arc], rx_port[arc], panel[arc], ingress[arc], egress[arc])
        tx_port[arc], rx_port[arc], panel[arc] = k, m, panel_ids[p]
        ingress[arc], egress[arc] = fabric.tx_port[hidx[u], k], fabric.rx_port[hidx[v], m]
        moves.append({"arc": arc, "tail": int(u), "head": int(v), "lane": int(a.lanes[arc]), "before": before,
                      "after": _where(a, arc, k, m, panel[arc], ingress[arc], egress[arc])})
    out = replace(a, tx_port=tx_port, rx_port=rx_port, ingress=ingress, egress=egress, panel=tuple(panel))
    out.check(fabric)
    return Repatch(out, moves)
