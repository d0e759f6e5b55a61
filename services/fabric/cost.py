"""Capital cost of a fabric (TopoOpt App. G, Table 2).

A direct-connect fabric is priced by its parts, counted from the fabric document:

- per host port: one NIC port and one transceiver at the link bandwidth (TopoOpt: "a TopoOpt system of 128
  nodes with degree d uses 128 x d NICs and transceivers"; NIC prices are per link, "two 2-port NICs as one
  4-port NIC");
- per panel port: the panel's device profile's price per port (Table 2: patch panel $100, OCS $520; the
  quotes carry the suppliers' 40 % discount, as the paper says; whether the table's numbers already include
  it is not stated);
- per host port with a look-ahead side: one 1x2 optical switch ($25);
- fibers: two per host port and side (tx and rx), `fiber_m` metres each at $0.30/m; the paper draws each
  fiber's length from Uniform(0, 1000 m), so the default is its mean, 500 m.

Link bandwidths between the table's rows (10, 25, 40, 100, 200 Gbps) take the next row up; above 200 Gbps a
link is ceil(b / 100) lanes of 100 Gbps parts (TopoOpt: "for 200 Gbps, we use more 100 Gbps ports and
fibers"), while the optical parts stay one per host port ("the cost of optical components stays constant as
link bandwidth increases"). Prices are 2022 list prices as the paper gives them (sources below); they are
defaults, not quotes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .model import Fabric, FabricError

__all__ = ["PRICE_TABLE", "PRICE_SOURCES", "FIBER_USD_PER_M", "FIBER_MEAN_M", "SWITCH_1X2_USD", "SWITCH_PORT_USD",
           "CostEstimate", "cost_equivalent_ratio", "fabric_cost", "fat_tree_cost", "price_row"]

# TopoOpt Table 2: link Gbps -> (transceiver, NIC) in USD; patch panel / OCS ports come from the device profiles
PRICE_TABLE: dict[int, tuple[float, float]] = {10: (20.0, 185.0), 25: (39.0, 185.0), 40: (39.0, 354.0),
                                               100: (99.0, 678.0), 200: (198.0, 815.0)}
# TopoOpt Table 2: link Gbps -> electrical switch port (Edgecore bare-metal L3 switches) in USD
SWITCH_PORT_USD: dict[int, float] = {10: 94.0, 25: 144.0, 40: 144.0, 100: 187.0, 200: 374.0}
SWITCH_1X2_USD = 25.0
FIBER_USD_PER_M = 0.30
FIBER_MEAN_M = 500.0
PRICE_SOURCES = (
    "TopoOpt (NSDI'23) App. G, Table 2: transceivers and NICs at the lowest retail prices (Colfax, FS.com; NICs: "
    "Mellanox ConnectX), 200 Gbps parts estimated as twice 100 Gbps; patch panel ($100/port, Telescent), OCS "
    "($520/port, Polatis) and 1x2 switch ($25, Gezhi Photonics) from supplier quotes with a 40 % discount",
    "fiber: $0.30 per metre, lengths Uniform(0, 1000 m) as in TopoOpt App. G (default: the mean, 500 m)",
)


@dataclass
class CostEstimate:
    """Parts, their counts and prices, and the total (USD)."""

    link_gbps: float
    price_row_gbps: int
    lanes: int
    fiber_m: float
    items: list[dict] = field(default_factory=list)

    @property
    def total_usd(self) -> float:
        return sum(i["usd"] for i in self.items)

    def add(self, item: str, count: int, unit_usd: float, note: str = "") -> None:
        if count:
            self.items.append({"item": item, "count": int(count), "unit_usd": float(unit_usd),
                               "usd": round(count * unit_usd, 2), **({"note": note} if note else {})})

    def to_dict(self, hosts: int) -> dict:
        total = round(self.total_usd, 2)
        return {"link_gbps": self.link_gbps, "price_row_gbps": self.price_row_gbps, "lanes": self.lanes,
                "fiber_m": self.fiber_m, "items": self.items, "total_usd": total,
                "per_host_usd": round(total / hosts, 2) if hosts else 0.0, "sources": list(PRICE_SOURCES)}


def price_row(link_gbps: float) -> tuple[int, int]:
    """(table row in Gbps, lanes): the next row up, or ceil(b / 100) lanes of the 100 Gbps row above 200.

    >>> price_row(25), price_row(30), price_row(400)
    ((25, 1), (40, 1), (100, 4))
    """
    if not (math.isfinite(link_gbps) and link_gbps > 0):
        raise FabricError(f"link bandwidth must be a positive number of Gbps, got {link_gbps!r}")
    for row in sorted(PRICE_TABLE):
        if link_gbps <= row:
            return row, 1
    return 100, math.ceil(link_gbps / 100)


def fabric_cost(fabric: Fabric, link_gbps: float, *, hosts=None, fiber_m: float = FIBER_MEAN_M) -> CostEstimate:
    """Capital cost of `fabric` (or of the part `hosts` use: their ports, fibers, switches and the panel ports
    their fibers land on) with links of `link_gbps`.

    Parameters
    ----------
    fabric : Fabric
    link_gbps : float
        One link's bandwidth (a plan's B / d).
    hosts : iterable of host ids, optional
        Price only these hosts and the panel ports cabled to them; by default the whole fabric, every panel
        port included (spare ones too).
    fiber_m : float
        Mean fiber length in metres.

    Returns
    -------
    CostEstimate

    Examples
    --------
    >>> from services.fabric import planes_fabric
    >>> c = fabric_cost(planes_fabric(128, 4, lookahead=True), 100)      # TopoOpt's 128 nodes, d = 4
    >>> [(i["item"], i["count"]) for i in c.items]
    [('NIC ports', 512), ('transceivers', 512), ('patch_panel ports', 1024), ('1x2 switches', 512), ('fibers', 2048)]
    >>> round(c.total_usd)
    820224
    """
    if not (math.isfinite(fiber_m) and 0 <= fiber_m <= 1e6):
        raise FabricError(f"fiber length must be between 0 and 1e6 m, got {fiber_m!r}")
    row, lanes = price_row(link_gbps)
    xcvr, nic = PRICE_TABLE[row]
    chosen = fabric.hosts if hosts is None else [fabric.host(h) for h in hosts]
    ports = sum(len(h.ports) for h in chosen)
    sides = 2 if fabric.lookahead else 1
    out = CostEstimate(float(link_gbps), row, lanes, float(fiber_m))
    lane_note = f"{lanes} x {row} Gbps per link" if lanes > 1 else ""
    out.add("NIC ports", ports * lanes, nic, lane_note)
    out.add("transceivers", ports * lanes, xcvr, lane_note)
    if hosts is None:
        used = {p.id: p.ports for p in fabric.panels}
    else:
        tx: dict[str, int] = {}
        rx: dict[str, int] = {}
        for h in chosen:
            for hp in h.ports:
                for f, count in ((hp.tx, tx), (hp.rx, rx)) + (((hp.alt_tx, tx), (hp.alt_rx, rx))
                                                              if fabric.lookahead else ()):
                    count[f.panel] = count.get(f.panel, 0) + 1
        # a duplex panel port has an ingress (a tx fiber) and an egress (an rx fiber) side
        used = {p: max(tx.get(p, 0), rx.get(p, 0)) for p in set(tx) | set(rx)}
    by_kind: dict[str, tuple[int, float, str]] = {}
    for pid, count in used.items():
        dev = fabric.panel(pid).device()
        n, _, model = by_kind.get((dev.kind, dev.cost_per_port_usd), (0, 0.0, dev.model))
        by_kind[(dev.kind, dev.cost_per_port_usd)] = (n + count, dev.cost_per_port_usd, model)
    for (kind, _), (count, unit, model) in sorted(by_kind.items()):
        out.add(f"{kind} ports", count, unit, model)
    if fabric.lookahead:
        out.add("1x2 switches", ports, SWITCH_1X2_USD, "one per host port (active / look-ahead)")
    out.add("fibers", 2 * ports * sides, fiber_m * FIBER_USD_PER_M, f"{fiber_m:g} m at ${FIBER_USD_PER_M}/m")
    return out


def fat_tree_cost(hosts: int, host_gbps: float, *, fiber_m: float = FIBER_MEAN_M) -> CostEstimate:
    """Capital cost of a full-bisection three-tier k-ary fat-tree for `hosts` hosts with one NIC of `host_gbps`
    each (TopoOpt App. G: "a standard k = 8 Fat-tree has 80 switches ... 640 switch ports in total, in addition
    to 1 NIC per host and one transceiver per NIC and switch port"): k the smallest even number with
    k^3/4 >= hosts, 5k^3/4 switch ports, and 3k^3/4 links (host-ToR, ToR-aggregation, aggregation-core) of two
    fibers each; bandwidths above the table's rows are lanes of 100 Gbps parts, as for `fabric_cost`.

    >>> c = fat_tree_cost(128, 100)                       # k = 8: 640 switch ports
    >>> [(i["item"], i["count"]) for i in c.items]
    [('NIC ports', 128), ('transceivers', 768), ('switch ports', 640), ('fibers', 768)]
    """
    if not isinstance(hosts, int) or isinstance(hosts, bool) or not 1 <= hosts <= 1 << 20:
        raise FabricError(f"hosts must be an integer in 1..{1 << 20}, got {hosts!r}")
    if not (math.isfinite(fiber_m) and 0 <= fiber_m <= 1e6):
        raise FabricError(f"fiber length must be between 0 and 1e6 m, got {fiber_m!r}")
    row, lanes = price_row(host_gbps)
    xcvr, nic = PRICE_TABLE[row]
    k = 2
    while k ** 3 // 4 < hosts:
        k += 2
    switch_ports = 5 * k ** 3 // 4
    out = CostEstimate(float(host_gbps), row, lanes, float(fiber_m))
    lane_note = f"{lanes} x {row} Gbps per link" if lanes > 1 else ""
    out.add("NIC ports", hosts * lanes, nic, lane_note)
    out.add("transceivers", (hosts + switch_ports) * lanes, xcvr, lane_note)
    out.add("switch ports", switch_ports * lanes, SWITCH_PORT_USD[row], f"k = {k}" + (f"; {lane_note}" if lanes > 1 else ""))
    out.add("fibers", 2 * 3 * k ** 3 // 4 * lanes, FIBER_USD_PER_M * fiber_m, f"{fiber_m:g} m each")
    return out


def cost_equivalent_ratio(hosts: int, degree: int, link_gbps: float, *, fiber_m: float = FIBER_MEAN_M) -> float:
    """The cost of a full-bisection fat-tree whose hosts send degree x link_gbps over the cost of TopoOpt's
    fabric for the same hosts (TopoOpt App. G: degree ports of link_gbps a host, each with a NIC port and a
    transceiver, a patch-panel port on each of the 2d panels of the look-ahead design, a 1x2 switch, and two
    fibers per port and plane: what `fabric_cost` counts on `planes_fabric(hosts, degree, lookahead=True)`,
    counted here without building the document). TopoOpt's cost-equivalent fat-tree gives each host d x B' with
    B' "selected such that Fat-tree's cost is similar to TopoOpt" (section 5.1); with cost linear in bandwidth
    (lanes of 100 Gbps parts above 200 Gbps) that is d x B / this ratio.

    >>> round(cost_equivalent_ratio(432, 8, 100), 2)           # TopoOpt section 5.6's cluster
    1.94
    """
    from .devices import PROFILES

    if not isinstance(degree, int) or isinstance(degree, bool) or not 1 <= degree <= 1 << 10:
        raise FabricError(f"degree must be an integer in 1..{1 << 10}, got {degree!r}")
    fat_tree = fat_tree_cost(hosts, degree * link_gbps, fiber_m=fiber_m).total_usd
    row, lanes = price_row(link_gbps)
    xcvr, nic = PRICE_TABLE[row]
    ports = hosts * degree
    topoopt = (ports * lanes * (nic + xcvr) + 2 * ports * PROFILES["patch_panel"].cost_per_port_usd
               + ports * SWITCH_1X2_USD + 2 * 2 * ports * fiber_m * FIBER_USD_PER_M)
    return fat_tree / topoopt
