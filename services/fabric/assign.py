"""Port assignment: topology arcs -> (tx host port, rx host port, panel, ingress, egress).

Topology node i runs on host `hosts[i]`. Every arc u -> v (lane l) gets a tx port of u's host and an rx
port of v's host whose fibers land on the SAME panel, so that one cross-connect (ingress of u's tx fiber
-> egress of v's rx fiber) realises it. Every host port's tx and rx is used at most once; when the
topology degree d equals the fabric's ports per host, exactly once (out-degree = in-degree = d).

Two methods:
- 'konig' (uniform cablings: every chosen host has the same number c_p of tx fibers and of rx fibers on
  each panel p; this covers the 'planes' layout (c_p = 1, TopoOpt Fig. 5) and one shared panel (c_p = d)).
  The arc multiset is a d-regular bipartite multigraph (out-copies vs in-copies), so by Konig's theorem
  it is the union of d perfect matchings = d permutations of the nodes ("slots"). Each slot gets one
  panel; slot j on panel p uses, at every host, its j-th tx port and j-th rx port on p. In the planes
  layout slot k is panel k: tx port k -> rx port k of the next host.
- 'ilp' (anything else): choose a panel for each arc subject to per-(host, panel) tx and rx fiber
  counts. This is a list edge-colouring problem (NP-hard in general); it is solved exactly as a small
  integer program (scipy HiGHS) after cheap per-arc and per-host checks that explain most impossible
  cablings by name. Within a panel any pairing of a host's ports is valid, so ports are handed out in
  ascending port order.

Self-loops (u -> u) occupy a tx and an rx port of u's host like any arc, as in the topology model. With
`self_loops='loopback'` (default) they are cabled as a loopback cross-connect (u's own tx fiber -> u's
own rx fiber on the panel): it carries no data but keeps the port lit (NIC link up) and makes the
panel's port map complete. With `self_loops='dark'` the ports are reserved and no cross-connect is made.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from .model import Fabric, FabricError

SELF_LOOP_POLICIES = ("loopback", "dark")
METHODS = ("auto", "konig", "ilp")


class AssignmentError(FabricError):
    """The topology cannot be wired onto the chosen hosts (or an assignment is inconsistent)."""


# ----- Konig split ---------------------------------------------------------------------------------
def konig_split(nodes: int, tails, heads) -> np.ndarray:
    """Split a d-regular directed multigraph into d permutations.

    `tails`, `heads`: the arcs, sorted by (tail, head) (parallel arcs adjacent, as in Topology).
    Returns slots, shape (d, nodes): slots[s, u] = index of the arc out of u used by permutation s; its
    heads heads[slots[s]] are a permutation of the nodes. Parallel arcs of one pair are used in lane
    order. Each round takes a maximum matching (Hopcroft-Karp, scipy) of the remaining pairs; in a
    k-regular bipartite multigraph it is perfect, and removing it leaves a (k-1)-regular one.
    """
    tails = np.asarray(tails, dtype=np.int64)
    heads = np.asarray(heads, dtype=np.int64)
    if tails.size % nodes:
        raise AssignmentError(f"{tails.size} arcs on {nodes} nodes cannot be regular")
    d = tails.size // nodes
    if not (np.bincount(tails, minlength=nodes) == d).all() or not (np.bincount(heads, minlength=nodes) == d).all():
        raise AssignmentError("Konig split needs a regular digraph (every out- and in-degree equal)")
    key = tails * nodes + heads
    if (np.diff(key) < 0).any():
        raise AssignmentError("arcs must be sorted by (tail, head)")
    ukeys, start, count = np.unique(key, return_index=True, return_counts=True)
    remaining = count.copy()
    used = np.zeros_like(count)
    slots = np.empty((d, nodes), dtype=np.int64)
    everyone = np.arange(nodes)
    for s in range(d):
        live = remaining > 0
        m = csr_matrix((np.ones(int(live.sum()), dtype=np.int8), (ukeys[live] // nodes, ukeys[live] % nodes)),
                       shape=(nodes, nodes))
        match = maximum_bipartite_matching(m, perm_type="column")
        if (match < 0).any():   # impossible for a regular multigraph; guard anyway
            raise AssignmentError(f"Konig split: round {s} found no perfect matching")
        q = np.searchsorted(ukeys, everyone * nodes + match)
        slots[s] = start[q] + used[q]
        used[q] += 1
        remaining[q] -= 1
    return slots


def split_permutations(topology) -> np.ndarray:
    """Konig split of a Topology: (d, N) arc indices, see konig_split."""
    return konig_split(topology.nodes, topology.tails, topology.heads)


# ----- the assignment ------------------------------------------------------------------------------
@dataclass
class Assignment:
    """Where every arc of one plan's topology is cabled. Per-arc arrays are in topology arc order."""

    plan_id: str | None
    fabric_id: str
    expr: str
    nodes: int
    degree: int
    hosts: tuple[str, ...]          # node i -> hosts[i]
    tails: np.ndarray
    heads: np.ndarray
    lanes: np.ndarray
    tx_port: np.ndarray             # host port of hosts[tail] carrying the arc
    rx_port: np.ndarray             # host port of hosts[head] receiving it
    panel: tuple[str, ...]          # panel id per arc
    ingress: np.ndarray             # panel port where the tx fiber lands
    egress: np.ndarray              # panel port where the rx fiber lands
    method: str = "konig"
    self_loops: str = "loopback"
    slot: np.ndarray | None = None  # Konig permutation index per arc ('konig' method only)
    slot_panels: tuple[str, ...] | None = field(default=None)

    @property
    def arcs(self) -> int:
        return int(self.tails.size)

    def permutations(self) -> list[list[int]] | None:
        """perm[s][u] = head of the slot-s arc out of node u (Konig method only)."""
        if self.slot is None:
            return None
        perms = np.empty((self.degree, self.nodes), dtype=np.int64)
        perms[self.slot, self.tails] = self.heads
        return perms.tolist()

    def panels_used(self) -> list[str]:
        return sorted(set(self.panel))

    def cross_connects(self) -> dict[str, list[dict]]:
        """Per panel id, the cross-connects this plan needs, sorted by ingress (see crossconnect.py)."""
        out: dict[str, list[dict]] = {}
        tails, heads, lanes = self.tails.tolist(), self.heads.tolist(), self.lanes.tolist()
        txp, rxp, ing, eg = self.tx_port.tolist(), self.rx_port.tolist(), self.ingress.tolist(), self.egress.tolist()
        for a in range(self.arcs):
            loop = tails[a] == heads[a]
            if loop and self.self_loops == "dark":
                continue
            out.setdefault(self.panel[a], []).append({
                "ingress": ing[a], "egress": eg[a], "plan_id": self.plan_id, "arc": a,
                "tail": tails[a], "head": heads[a], "lane": lanes[a],
                "tx_host": self.hosts[tails[a]], "tx_port": txp[a],
                "rx_host": self.hosts[heads[a]], "rx_port": rxp[a], "loopback": loop})
        for lst in out.values():
            lst.sort(key=lambda c: c["ingress"])
        return dict(sorted(out.items()))

    def links(self) -> list[dict]:
        """One row per arc (human-readable view of the columnar to_dict)."""
        return [{"arc": a, "tail": int(self.tails[a]), "head": int(self.heads[a]), "lane": int(self.lanes[a]),
                 "tx_host": self.hosts[self.tails[a]], "tx_port": int(self.tx_port[a]),
                 "rx_host": self.hosts[self.heads[a]], "rx_port": int(self.rx_port[a]),
                 "panel": self.panel[a], "ingress": int(self.ingress[a]), "egress": int(self.egress[a])}
                for a in range(self.arcs)]

    # ----- checking ----------------------------------------------------------------------------
    def check(self, fabric: Fabric) -> None:
        """Re-verify against the fabric: raises AssignmentError on any inconsistency."""
        if fabric.id != self.fabric_id:
            raise AssignmentError(f"assignment is for fabric {self.fabric_id!r}, not {fabric.id!r}")
        if len(self.hosts) != self.nodes or len(set(self.hosts)) != self.nodes:
            raise AssignmentError("hosts must list one distinct host per node")
        try:
            hidx = np.array([fabric.host_index[h] for h in self.hosts], dtype=np.int64)
        except KeyError as e:
            raise AssignmentError(f"fabric {fabric.id!r} has no host {e.args[0]!r}") from None
        D = fabric.ports_per_host
        n = self.arcs
        if any(len(x) != n for x in (self.heads, self.lanes, self.tx_port, self.rx_port, self.panel,
                                     self.ingress, self.egress)):
            raise AssignmentError("per-arc columns have different lengths")
        if n != self.nodes * self.degree:
            raise AssignmentError(f"{n} arcs, expected nodes * degree = {self.nodes * self.degree}")
        for name, col in (("tx_port", self.tx_port), ("rx_port", self.rx_port)):
            if ((col < 0) | (col >= D)).any():
                raise AssignmentError(f"{name} outside 0..{D - 1}")
        try:
            pidx = np.array([fabric.panel_index[p] for p in self.panel], dtype=np.int64)
        except KeyError as e:
            raise AssignmentError(f"fabric {fabric.id!r} has no panel {e.args[0]!r}") from None
        th, hh = hidx[self.tails], hidx[self.heads]
        bad = ((fabric.tx_panel[th, self.tx_port] != pidx) | (fabric.tx_port[th, self.tx_port] != self.ingress)
               | (fabric.rx_panel[hh, self.rx_port] != pidx) | (fabric.rx_port[hh, self.rx_port] != self.egress))
        if bad.any():
            a = int(np.flatnonzero(bad)[0])
            raise AssignmentError(f"arc {a} ({self.tails[a]}->{self.heads[a]}): panel {self.panel[a]!r} "
                                  f"ingress {self.ingress[a]} / egress {self.egress[a]} are not where host "
                                  f"{self.hosts[self.tails[a]]!r} tx port {self.tx_port[a]} and host "
                                  f"{self.hosts[self.heads[a]]!r} rx port {self.rx_port[a]} are cabled")
        for side, node, port in (("tx", self.tails, self.tx_port), ("rx", self.heads, self.rx_port)):
            key = node.astype(np.int64) * D + port
            uk, cnt = np.unique(key, return_counts=True)
            if (cnt > 1).any():
                k = int(uk[cnt > 1][0])
                raise AssignmentError(f"host {self.hosts[k // D]!r} {side} port {k % D} carries {cnt.max()} arcs")
        for node_col, name in ((self.tails, "out"), (self.heads, "in")):
            deg = np.bincount(node_col, minlength=self.nodes)
            if (deg != self.degree).any():
                u = int(np.flatnonzero(deg != self.degree)[0])
                raise AssignmentError(f"node {u} has {name}-degree {deg[u]}, expected {self.degree}")

    # ----- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        arcs = {"tail": self.tails.tolist(), "head": self.heads.tolist(), "lane": self.lanes.tolist(),
                "tx_port": self.tx_port.tolist(), "rx_port": self.rx_port.tolist(), "panel": list(self.panel),
                "ingress": self.ingress.tolist(), "egress": self.egress.tolist()}
        if self.slot is not None:
            arcs["slot"] = self.slot.tolist()
        return {"plan_id": self.plan_id, "fabric_id": self.fabric_id, "expr": self.expr, "nodes": self.nodes,
                "degree": self.degree, "method": self.method, "self_loops": self.self_loops,
                "hosts": list(self.hosts), "panels": self.panels_used(),
                "slot_panels": None if self.slot_panels is None else list(self.slot_panels),
                "permutations": self.permutations(), "arcs": arcs}

    @classmethod
    def from_dict(cls, data: dict) -> "Assignment":
        try:
            a = data["arcs"]
            col = lambda k: np.asarray(a[k], dtype=np.int64)  # noqa: E731
            return cls(plan_id=data.get("plan_id"), fabric_id=data["fabric_id"], expr=data["expr"],
                       nodes=int(data["nodes"]), degree=int(data["degree"]), hosts=tuple(data["hosts"]),
                       tails=col("tail"), heads=col("head"), lanes=col("lane"), tx_port=col("tx_port"),
                       rx_port=col("rx_port"), panel=tuple(a["panel"]), ingress=col("ingress"),
                       egress=col("egress"), method=data.get("method", "konig"),
                       self_loops=data.get("self_loops", "loopback"),
                       slot=col("slot") if "slot" in a else None,
                       slot_panels=None if data.get("slot_panels") is None else tuple(data["slot_panels"]))
        except (KeyError, TypeError, ValueError) as e:
            raise AssignmentError(f"malformed assignment: {e}") from None


# ----- solving -------------------------------------------------------------------------------------
def assign_ports(fabric: Fabric, hosts: Sequence[str], topology, *, plan_id: str | None = None,
                 self_loops: str = "loopback", method: str = "auto",
                 time_limit_s: float = 60.0) -> Assignment:
    """Wire `topology` onto `hosts` (node i -> hosts[i]) of `fabric`. Raises AssignmentError with the
    reason when it is impossible. Deterministic for given inputs."""
    if self_loops not in SELF_LOOP_POLICIES:
        raise AssignmentError(f"self_loops must be one of {', '.join(SELF_LOOP_POLICIES)}, got {self_loops!r}")
    if method not in METHODS:
        raise AssignmentError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    hosts = tuple(str(h) for h in hosts)
    N, d = topology.nodes, topology.degree
    if len(hosts) != N:
        raise AssignmentError(f"topology {topology.expr} has {N} nodes but {len(hosts)} hosts were given")
    if len(set(hosts)) != len(hosts):
        dup = next(h for i, h in enumerate(hosts) if h in hosts[:i])
        raise AssignmentError(f"host {dup!r} is given for more than one node")
    missing = [h for h in hosts if h not in fabric.host_index]
    if missing:
        raise AssignmentError(f"fabric {fabric.id!r} has no host {missing[0]!r}")
    D = fabric.ports_per_host
    if d > D:
        raise AssignmentError(f"topology {topology.expr} has degree {d} but hosts of fabric {fabric.id!r} have "
                              f"only {D} ports")
    hidx = np.array([fabric.host_index[h] for h in hosts], dtype=np.int64)
    P = len(fabric.panels)
    tx_cap = np.zeros((N, P), dtype=np.int64)
    rx_cap = np.zeros((N, P), dtype=np.int64)
    np.add.at(tx_cap, (np.repeat(np.arange(N), D), fabric.tx_panel[hidx].ravel()), 1)
    np.add.at(rx_cap, (np.repeat(np.arange(N), D), fabric.rx_panel[hidx].ravel()), 1)
    tails = topology.tails.astype(np.int64)
    heads = topology.heads.astype(np.int64)
    lanes = np.asarray(topology.lanes, dtype=np.int64)

    uniform = bool((tx_cap == tx_cap[0]).all() and (rx_cap == rx_cap[0]).all())
    per_slot = np.minimum(tx_cap[0], rx_cap[0])
    if method == "konig" and not (uniform and per_slot.sum() >= d):
        raise AssignmentError("method 'konig' needs a uniform cabling: every host with the same number of tx "
                              f"and rx fibers on each panel, at least {d} usable in total")
    if method != "ilp" and uniform and per_slot.sum() >= d:
        panel_of_arc, slot, slot_panels = _konig(N, d, tails, heads, per_slot)
        used_method = "konig"
    else:
        _explain_local(fabric, hosts, hidx, tails, heads, tx_cap, rx_cap, d)
        panel_of_arc = _ilp(fabric, hosts, tails, heads, tx_cap, rx_cap, time_limit_s, topology.expr)
        slot, slot_panels, used_method = None, None, "ilp"

    # hand out host ports: at each host, per panel, ascending host port order; Konig slot j on panel p
    # takes the j-th port on p (slots are already numbered per panel in that order)
    tx_port = np.empty(tails.size, dtype=np.int64)
    rx_port = np.empty(tails.size, dtype=np.int64)
    tx_lists = [[np.flatnonzero(fabric.tx_panel[h] == p) for p in range(P)] for h in hidx]
    rx_lists = [[np.flatnonzero(fabric.rx_panel[h] == p) for p in range(P)] for h in hidx]
    if slot is not None:
        rank = np.zeros(d, dtype=np.int64)   # index of each slot among the slots of its panel
        for s in range(d):
            rank[s] = int((np.asarray(slot_panels[:s]) == slot_panels[s]).sum())
        for a in range(tails.size):
            p, j = panel_of_arc[a], rank[slot[a]]
            tx_port[a] = tx_lists[tails[a]][p][j]
            rx_port[a] = rx_lists[heads[a]][p][j]
    else:
        tx_next = np.zeros((N, P), dtype=np.int64)
        rx_next = np.zeros((N, P), dtype=np.int64)
        for a in range(tails.size):
            u, v, p = tails[a], heads[a], panel_of_arc[a]
            tx_port[a] = tx_lists[u][p][tx_next[u, p]]
            tx_next[u, p] += 1
            rx_port[a] = rx_lists[v][p][rx_next[v, p]]
            rx_next[v, p] += 1
    th, hh = hidx[tails], hidx[heads]
    out = Assignment(
        plan_id=plan_id, fabric_id=fabric.id, expr=topology.expr, nodes=N, degree=d, hosts=hosts,
        tails=tails, heads=heads, lanes=lanes, tx_port=tx_port, rx_port=rx_port,
        panel=tuple(fabric.panels[p].id for p in panel_of_arc.tolist()),
        ingress=fabric.tx_port[th, tx_port].copy(), egress=fabric.rx_port[hh, rx_port].copy(),
        method=used_method, self_loops=self_loops, slot=slot,
        slot_panels=None if slot_panels is None else tuple(fabric.panels[p].id for p in slot_panels))
    out.check(fabric)
    return out


def _konig(N: int, d: int, tails, heads, per_slot: np.ndarray):
    """Panels for a uniform cabling: d Konig permutations, slots filled panel by panel in panel order."""
    slot_panels: list[int] = []
    for p, c in enumerate(per_slot.tolist()):
        take = min(c, d - len(slot_panels))
        slot_panels += [p] * take
        if len(slot_panels) == d:
            break
    slots = konig_split(N, tails, heads)
    slot = np.empty(tails.size, dtype=np.int64)
    for s in range(d):
        slot[slots[s]] = s
    panel_of_arc = np.asarray(slot_panels, dtype=np.int64)[slot]
    return panel_of_arc, slot, slot_panels


def _names(fabric: Fabric, panels) -> str:
    return ", ".join(repr(fabric.panels[p].id) for p in panels) or "none"


def _explain_local(fabric, hosts, hidx, tails, heads, tx_cap, rx_cap, d) -> None:
    """Necessary conditions checked one arc / one host at a time, with a precise message."""
    N = len(hosts)
    ok = (tx_cap[tails] > 0) & (rx_cap[heads] > 0)          # (arcs, P): panel usable for the arc
    dead = ~ok.any(axis=1)
    if dead.any():
        a = int(np.flatnonzero(dead)[0])
        u, v = int(tails[a]), int(heads[a])
        raise AssignmentError(
            f"arc {u}->{v} (host {hosts[u]!r} -> host {hosts[v]!r}): no panel holds both a tx fiber of "
            f"{hosts[u]!r} (its tx fibers land on {_names(fabric, np.flatnonzero(tx_cap[u]))}) and an rx "
            f"fiber of {hosts[v]!r} (its rx fibers land on {_names(fabric, np.flatnonzero(rx_cap[v]))})")
    if d == fabric.ports_per_host:   # every fiber carries an arc: each panel needs as many tx as rx fibers
        tx_sum, rx_sum = tx_cap.sum(axis=0), rx_cap.sum(axis=0)
        if (tx_sum != rx_sum).any():
            p = int(np.flatnonzero(tx_sum != rx_sum)[0])
            raise AssignmentError(
                f"panel {fabric.panels[p].id!r} holds {tx_sum[p]} tx fibers but {rx_sum[p]} rx fibers of the chosen "
                f"hosts; with degree {d} = ports per host every fiber carries an arc, so each panel needs as "
                f"many tx as rx fibers")
    order_out = np.argsort(tails, kind="stable").reshape(N, d)
    order_in = np.argsort(heads, kind="stable").reshape(N, d)
    for side, order, panels_of, cap_name in (("tx", order_out, fabric.tx_panel, "out"),
                                             ("rx", order_in, fabric.rx_panel, "in")):
        for u in range(N):
            arcs = order[u]
            ports = panels_of[hidx[u]]                         # panel of each host port on this side
            usable = ok[arcs][:, ports]                        # (d arcs, D ports)
            m = maximum_bipartite_matching(csr_matrix(usable.astype(np.int8)), perm_type="column")
            if (m < 0).any():
                a = int(arcs[int(np.flatnonzero(m < 0)[0])])
                other = int(heads[a]) if side == "tx" else int(tails[a])
                raise AssignmentError(
                    f"host {hosts[u]!r} (node {u}): its {d} {cap_name}-arcs cannot get distinct {side} ports; "
                    f"e.g. the arc {'to' if side == 'tx' else 'from'} host {hosts[other]!r} can only use panels "
                    f"{_names(fabric, np.flatnonzero(ok[a]))}, and {hosts[u]!r} has "
                    + ", ".join(f"{int(c)} {side} fiber(s) on {fabric.panels[p].id!r}"
                                for p, c in enumerate((tx_cap if side == 'tx' else rx_cap)[u]) if c))


def _ilp(fabric, hosts, tails, heads, tx_cap, rx_cap, time_limit_s, expr) -> np.ndarray:
    """Choose a panel per arc: integer y[pair, panel] with per-(host, panel) tx / rx capacities."""
    N, P = tx_cap.shape
    key = tails * N + heads
    ukeys, start, mult = np.unique(key, return_index=True, return_counts=True)
    qt, qh = ukeys // N, ukeys % N
    Q = ukeys.size
    allowed = (tx_cap[qt] > 0) & (rx_cap[qh] > 0)            # (Q, P)
    vq, vp = np.nonzero(allowed)
    V = vq.size
    rows = np.concatenate([vq, Q + qt[vq] * P + vp, Q + N * P + qh[vq] * P + vp])
    cols = np.tile(np.arange(V), 3)
    A = coo_matrix((np.ones(3 * V), (rows, cols)), shape=(Q + 2 * N * P, V)).tocsr()
    lb = np.concatenate([mult, np.zeros(2 * N * P)])
    ub = np.concatenate([mult, tx_cap.ravel(), rx_cap.ravel()]).astype(float)
    res = milp(c=np.zeros(V), constraints=LinearConstraint(A, lb, ub), integrality=np.ones(V),
               bounds=Bounds(np.zeros(V), mult[vq].astype(float)),
               options={"time_limit": float(time_limit_s), "presolve": True})
    if res.status == 2 or (res.x is None and res.status != 1):
        raise AssignmentError(
            f"{expr} on hosts {list(hosts)[:8]}{'...' if len(hosts) > 8 else ''}: every arc has a usable panel "
            f"and every host passes its own port check, but no choice of panels satisfies all hosts' per-panel "
            f"tx/rx fiber counts at once (integer program infeasible); recable, choose other hosts or a "
            f"different node-to-host mapping")
    if res.x is None:
        raise AssignmentError(f"{expr}: no panel assignment found within {time_limit_s:g} s (integer program "
                              f"status {res.status}: {res.message})")
    y = np.rint(res.x).astype(np.int64)
    panel_of_arc = np.empty(tails.size, dtype=np.int64)
    filled = np.zeros(Q, dtype=np.int64)
    for i in np.flatnonzero(y):                             # variables are in (pair, panel) order
        q, p, n = vq[i], vp[i], y[i]
        panel_of_arc[start[q] + filled[q]: start[q] + filled[q] + n] = p
        filled[q] += n
    if (filled != mult).any():
        raise AssignmentError(f"{expr}: integer program returned an inconsistent solution")
    return panel_of_arc
