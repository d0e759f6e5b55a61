"""The physical fabric: hosts with d ports, each port's tx and rx fiber cabled to a panel port.

Vocabulary (TopoOpt section 3, Fig. 5; the Telescent and Polatis control interfaces):
- A *panel* is a robotic patch panel (Telescent NTM) or an optical circuit switch (Polatis, Calient);
  `kind` is 'patch_panel' or 'ocs'. Its ports are numbered 0..ports-1 and every panel port is duplex:
  an **ingress** side that takes light in (a host's tx fiber lands there) and an **egress** side that
  sends light out (a host's rx fiber lands there). This is the Telescent model ("each port has an
  independent input and output") and the Polatis ingress/egress model (port p = p-th ingress/egress pair).
  Agents map these logical numbers to vendor numbering.
- A *cross-connect* on one panel joins an ingress to an egress of that same panel (simplex: light from
  the ingress port leaves at the egress port), so u's tx can reach v's rx only when both fibers land on
  the same panel.
- Each *host* has `ports_per_host` ports 0..D-1; port k has a tx fiber and an rx fiber, each landing on
  a (panel, port). tx and rx of one host port may land on different panel ports or different panels.
- **Look-ahead planes** (TopoOpt App. C): a host port may have a 1x2 optical switch choosing
  between two pairs of fibers: side 0 (`tx`, `rx`) and side 1 (`alt`: its own tx and rx fiber, normally on
  other panels). At any time one side of each host is *active* (the job running on it) and the other is the
  *look-ahead* plane, where the next job's cross-connects are provisioned while the current job runs.
  `Fabric.side(s)` is the fabric as seen through side s of every port; either every host port has `alt`
  fibers or none does.
- A panel may carry `profile` overrides of its kind's device profile (services.fabric.devices).

A fabric is immutable once built and validated; every problem raises `CablingError` (a ValueError)
naming the host, host port, panel and panel port.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

PANEL_KINDS = ("patch_panel", "ocs")


class FabricError(ValueError):
    """Base class of every error of the fabric library (a ValueError: bad input, HTTP 4xx)."""


class CablingError(FabricError):
    """A fabric description that is malformed or physically impossible."""


@dataclass(frozen=True)
class Panel:
    id: str
    kind: str
    ports: int
    profile: dict | None = field(default=None, compare=False, hash=False)

    def to_dict(self) -> dict:
        out = {"id": self.id, "kind": self.kind, "ports": self.ports}
        return {**out, "profile": dict(self.profile)} if self.profile else out

    def device(self):
        """This panel's device profile (its kind's, with the panel's overrides)."""
        from .devices import profile_for

        return profile_for(self.kind, self.profile)


@dataclass(frozen=True)
class Fiber:
    """Where one fiber of a host port lands: `port` of `panel` (ingress side for tx, egress side for rx)."""

    panel: str
    port: int

    def to_dict(self) -> dict:
        return {"panel": self.panel, "port": self.port}


@dataclass(frozen=True)
class HostPort:
    tx: Fiber
    rx: Fiber
    alt_tx: Fiber | None = None         # side 1 of the port's 1x2 switch (look-ahead plane)
    alt_rx: Fiber | None = None

    def to_dict(self) -> dict:
        out = {"tx": self.tx.to_dict(), "rx": self.rx.to_dict()}
        if self.alt_tx is not None:
            out["alt"] = {"tx": self.alt_tx.to_dict(), "rx": self.alt_rx.to_dict()}
        return out

    def side(self, s: int) -> "HostPort":
        """The port as seen through side `s` of its 1x2 switch (side 1 needs alt fibers)."""
        return self if s == 0 else HostPort(self.alt_tx, self.alt_rx)


@dataclass(frozen=True)
class Host:
    id: str
    ports: tuple[HostPort, ...]

    def to_dict(self) -> dict:
        return {"id": self.id, "ports": [p.to_dict() for p in self.ports]}


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


class Fabric:
    """Validated hosts + panels + cabling, with array indexes for the assignment code.

    Arrays (host index h in fabric order, host port k):
      tx_panel[h, k], tx_port[h, k]: panel index and panel port (ingress) of the tx fiber;
      rx_panel[h, k], rx_port[h, k]: panel index and panel port (egress) of the rx fiber.
    """

    def __init__(self, panels: Iterable[Panel], hosts: Iterable[Host], fabric_id: str = "fabric"):
        self.id = str(fabric_id)
        self.panels: tuple[Panel, ...] = tuple(panels)
        self.hosts: tuple[Host, ...] = tuple(hosts)
        self._validate()
        self.panel_index = {p.id: i for i, p in enumerate(self.panels)}
        self.host_index = {h.id: i for i, h in enumerate(self.hosts)}
        D = self.ports_per_host
        shape = (len(self.hosts), D)
        self.tx_panel = np.empty(shape, dtype=np.int64)
        self.tx_port = np.empty(shape, dtype=np.int64)
        self.rx_panel = np.empty(shape, dtype=np.int64)
        self.rx_port = np.empty(shape, dtype=np.int64)
        for h, host in enumerate(self.hosts):
            for k, hp in enumerate(host.ports):
                self.tx_panel[h, k] = self.panel_index[hp.tx.panel]
                self.tx_port[h, k] = hp.tx.port
                self.rx_panel[h, k] = self.panel_index[hp.rx.panel]
                self.rx_port[h, k] = hp.rx.port
        for a in (self.tx_panel, self.tx_port, self.rx_panel, self.rx_port):
            a.setflags(write=False)

    # ----- validation ------------------------------------------------------------------------------
    def _validate(self) -> None:
        if not self.id:
            raise CablingError("a fabric needs a non-empty id")
        if not self.panels:
            raise CablingError(f"fabric {self.id!r}: needs at least one panel")
        seen: dict[str, Panel] = {}
        for p in self.panels:
            if not isinstance(p.id, str) or not p.id:
                raise CablingError(f"fabric {self.id!r}: panel ids must be non-empty strings, got {p.id!r}")
            if p.id in seen:
                raise CablingError(f"fabric {self.id!r}: panel {p.id!r} is declared twice")
            if p.kind not in PANEL_KINDS:
                raise CablingError(f"panel {p.id!r}: kind {p.kind!r} is not one of {', '.join(PANEL_KINDS)}")
            if not _is_int(p.ports) or p.ports < 1:
                raise CablingError(f"panel {p.id!r}: port count must be a positive integer, got {p.ports!r}")
            seen[p.id] = p
        if not self.hosts:
            raise CablingError(f"fabric {self.id!r}: needs at least one host")
        host_ids: set[str] = set()
        first = self.hosts[0]
        for host in self.hosts:
            if not isinstance(host.id, str) or not host.id:
                raise CablingError(f"fabric {self.id!r}: host ids must be non-empty strings, got {host.id!r}")
            if host.id in host_ids:
                raise CablingError(f"fabric {self.id!r}: host {host.id!r} is declared twice")
            host_ids.add(host.id)
            if not host.ports:
                raise CablingError(f"host {host.id!r} has no ports")
            if len(host.ports) != len(first.ports):
                raise CablingError(f"host {host.id!r} has {len(host.ports)} ports but host {first.id!r} has "
                                   f"{len(first.ports)}; every host needs the same number of ports")
        for p in self.panels:
            if p.profile:
                from .devices import ProfileError

                try:
                    p.device()
                except ProfileError as exc:
                    raise CablingError(f"panel {p.id!r}: {exc}") from None
        with_alt = {(hp.alt_tx is not None) and (hp.alt_rx is not None) for h in self.hosts for hp in h.ports}
        if len(with_alt) > 1 or any((hp.alt_tx is None) != (hp.alt_rx is None) for h in self.hosts for hp in h.ports):
            raise CablingError(f"fabric {self.id!r}: look-ahead planes need alt tx and rx fibers on every host port "
                               "(or on none)")
        ingress: dict[tuple[str, int], str] = {}
        egress: dict[tuple[str, int], str] = {}
        for host in self.hosts:
            for k, hp in enumerate(host.ports):
                fibers = [("tx", hp.tx, ingress, "ingress"), ("rx", hp.rx, egress, "egress")]
                if hp.alt_tx is not None:
                    fibers += [("alt tx", hp.alt_tx, ingress, "ingress"), ("alt rx", hp.alt_rx, egress, "egress")]
                for side, fiber, used, end in fibers:
                    where = f"host {host.id!r} port {k} {side}"
                    panel = seen.get(fiber.panel)
                    if panel is None:
                        raise CablingError(f"{where}: unknown panel {fiber.panel!r}")
                    if not _is_int(fiber.port) or not 0 <= fiber.port < panel.ports:
                        raise CablingError(f"{where}: panel {panel.id!r} has ports 0..{panel.ports - 1}, "
                                           f"got {fiber.port!r}")
                    key = (panel.id, int(fiber.port))
                    if key in used:
                        raise CablingError(f"panel {panel.id!r} port {fiber.port} {end} is cabled twice: "
                                           f"{used[key]} and {where}")
                    used[key] = where

    # ----- accessors -------------------------------------------------------------------------------
    @property
    def ports_per_host(self) -> int:
        return len(self.hosts[0].ports)

    @property
    def lookahead(self) -> bool:
        """True when every host port has a 1x2 switch with a second (alt) pair of fibers."""
        return self.hosts[0].ports[0].alt_tx is not None

    def side(self, s: int) -> "Fabric":
        """The fabric through side `s` of every 1x2 switch: same id, panels and hosts, each port's fibers
        those of side s (0: tx/rx, 1: alt). Side 0 is the fabric itself."""
        if s == 0:
            return self
        if s != 1 or not self.lookahead:
            raise CablingError(f"fabric {self.id!r} has no side {s!r}"
                               + ("" if self.lookahead else " (it has no look-ahead planes)"))
        if not hasattr(self, "_alt_side"):
            self._alt_side = Fabric(self.panels, [Host(h.id, tuple(hp.side(1) for hp in h.ports))
                                                  for h in self.hosts], self.id)
        return self._alt_side

    def panel(self, panel_id: str) -> Panel:
        try:
            return self.panels[self.panel_index[panel_id]]
        except KeyError:
            raise CablingError(f"fabric {self.id!r} has no panel {panel_id!r}") from None

    def host(self, host_id: str) -> Host:
        try:
            return self.hosts[self.host_index[host_id]]
        except KeyError:
            raise CablingError(f"fabric {self.id!r} has no host {host_id!r}") from None

    def ingress_owner(self, panel_id: str, port: int) -> tuple[str, int] | None:
        """(host, host port) whose tx fiber lands on this panel port, or None if it is not cabled."""
        return self._owners()[0].get((panel_id, int(port)))

    def egress_owner(self, panel_id: str, port: int) -> tuple[str, int] | None:
        """(host, host port) whose rx fiber lands on this panel port, or None if it is not cabled."""
        return self._owners()[1].get((panel_id, int(port)))

    def _owners(self):
        if not hasattr(self, "_owner_maps"):
            ing, eg = {}, {}
            for host in self.hosts:
                for k, hp in enumerate(host.ports):
                    ing[(hp.tx.panel, hp.tx.port)] = (host.id, k)
                    eg[(hp.rx.panel, hp.rx.port)] = (host.id, k)
                    if hp.alt_tx is not None:
                        ing[(hp.alt_tx.panel, hp.alt_tx.port)] = (host.id, k)
                        eg[(hp.alt_rx.panel, hp.alt_rx.port)] = (host.id, k)
            self._owner_maps = (ing, eg)
        return self._owner_maps

    def __repr__(self) -> str:
        return (f"Fabric({self.id!r}, hosts={len(self.hosts)}, ports_per_host={self.ports_per_host}, "
                f"panels={len(self.panels)})")

    # ----- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"id": self.id, "ports_per_host": self.ports_per_host,
                "panels": [p.to_dict() for p in self.panels],
                "hosts": [h.to_dict() for h in self.hosts]}

    @classmethod
    def from_dict(cls, data: dict) -> "Fabric":
        """Inverse of to_dict; shape errors raise CablingError naming the offending entry."""
        if not isinstance(data, dict):
            raise CablingError("a fabric is a JSON object with 'panels' and 'hosts'")
        fabric_id = data.get("id", "fabric")
        panels_in, hosts_in = data.get("panels"), data.get("hosts")
        if not isinstance(panels_in, list) or not isinstance(hosts_in, list):
            raise CablingError(f"fabric {fabric_id!r}: 'panels' and 'hosts' must be lists")
        panels = []
        for i, p in enumerate(panels_in):
            if not isinstance(p, dict) or not {"id", "kind", "ports"} <= p.keys():
                raise CablingError(f"fabric {fabric_id!r}: panel #{i} needs 'id', 'kind' and 'ports'")
            panels.append(Panel(p["id"], p["kind"], p["ports"], p.get("profile") or None))
        hosts = []
        for i, h in enumerate(hosts_in):
            if not isinstance(h, dict) or "id" not in h or not isinstance(h.get("ports"), list):
                raise CablingError(f"fabric {fabric_id!r}: host #{i} needs 'id' and a 'ports' list")
            ports = []
            for k, hp in enumerate(h["ports"]):
                if not isinstance(hp, dict) or "tx" not in hp or "rx" not in hp:
                    raise CablingError(f"host {h['id']!r} port {k}: needs 'tx' and 'rx'")
                if "port" in hp and hp["port"] != k:
                    raise CablingError(f"host {h['id']!r}: ports must be listed in order 0..D-1; "
                                       f"entry {k} says port {hp['port']!r}")
                fibers = []
                alt = hp.get("alt")
                if alt is not None and (not isinstance(alt, dict) or "tx" not in alt or "rx" not in alt):
                    raise CablingError(f"host {h['id']!r} port {k} alt: needs 'tx' and 'rx'")
                for side, f in (("tx", hp["tx"]), ("rx", hp["rx"])) + ((("alt tx", alt["tx"]), ("alt rx", alt["rx"]))
                                                                       if alt is not None else ()):
                    if not isinstance(f, dict) or "panel" not in f or "port" not in f:
                        raise CablingError(f"host {h['id']!r} port {k} {side}: needs 'panel' and 'port'")
                    fibers.append(Fiber(f["panel"], f["port"]))
                ports.append(HostPort(*fibers))
            hosts.append(Host(h["id"], tuple(ports)))
        fabric = cls(panels, hosts, fabric_id)
        if "ports_per_host" in data and data["ports_per_host"] != fabric.ports_per_host:
            raise CablingError(f"fabric {fabric_id!r}: ports_per_host says {data['ports_per_host']!r} but "
                               f"hosts have {fabric.ports_per_host} ports")
        return fabric


# ----- common layouts ------------------------------------------------------------------------------
def _host_ids(hosts: int | Sequence[str]) -> list[str]:
    if _is_int(hosts):
        if hosts < 1:
            raise CablingError(f"need at least one host, got {hosts}")
        width = len(str(int(hosts) - 1))
        return [f"h{i:0{width}d}" for i in range(int(hosts))]
    return [str(h) for h in hosts]


def planes_fabric(hosts: int | Sequence[str], ports_per_host: int, *, kind: str = "patch_panel",
                  panel_ports: int | None = None, fabric_id: str = "fabric",
                  panel_prefix: str = "plane", lookahead: bool = False) -> Fabric:
    """TopoOpt's layout (TopoOpt section 3, Fig. 5): host port k of every host goes to panel k ('{prefix}{k}'), tx and
    rx on the same duplex panel port, panel port index = host index. Panel k then realises one
    permutation of the hosts. With `lookahead` (TopoOpt App. C, Fig. 25) every host port's 1x2 switch has
    its second side on panel '{prefix}{k}-alt': 2d panels in all."""
    ids = _host_ids(hosts)
    ports = len(ids) if panel_ports is None else panel_ports
    if _is_int(ports) and ports < len(ids):
        raise CablingError(f"planes layout: {len(ids)} hosts need panels with at least {len(ids)} ports, "
                           f"got {ports}")
    panels = [Panel(f"{panel_prefix}{k}", kind, ports) for k in range(ports_per_host)]
    alts = [Panel(f"{panel_prefix}{k}-alt", kind, ports) for k in range(ports_per_host)] if lookahead else []

    def port(i: int, k: int) -> HostPort:
        alt = (Fiber(alts[k].id, i), Fiber(alts[k].id, i)) if lookahead else (None, None)
        return HostPort(Fiber(panels[k].id, i), Fiber(panels[k].id, i), *alt)
    host_list = [Host(h, tuple(port(i, k) for k in range(ports_per_host))) for i, h in enumerate(ids)]
    return Fabric(panels + alts, host_list, fabric_id)


def shared_panel_fabric(hosts: int | Sequence[str], ports_per_host: int, *, kind: str = "patch_panel",
                        panel_ports: int | None = None, fabric_id: str = "fabric",
                        panel_id: str = "panel0", lookahead: bool = False,
                        panel_prefix: str | None = None) -> Fabric:
    """One panel holding every host port: host i port k on duplex panel port i * D + k (with `lookahead`,
    the port's alt side on panel port N * D + i * D + k of the same panel). Its id is `panel_id`, or
    '{panel_prefix}0' when a prefix is given (the planes layout's naming: panel ids are global, so each
    fabric registered with a layout needs its own prefix)."""
    if panel_prefix is not None:
        panel_id = f"{panel_prefix}0"
    ids = _host_ids(hosts)
    sides = 2 if lookahead else 1
    need = len(ids) * ports_per_host * sides
    ports = need if panel_ports is None else panel_ports
    if _is_int(ports) and ports < need:
        raise CablingError(f"shared-panel layout: {len(ids)} hosts x {ports_per_host} ports"
                           + (" x 2 sides" if lookahead else "") + f" need a panel with at least {need} ports, "
                           f"got {ports}")
    panel = Panel(panel_id, kind, ports)
    half = len(ids) * ports_per_host

    def port(i: int, k: int) -> HostPort:
        q = i * ports_per_host + k
        alt = (Fiber(panel_id, half + q), Fiber(panel_id, half + q)) if lookahead else (None, None)
        return HostPort(Fiber(panel_id, q), Fiber(panel_id, q), *alt)
    host_list = [Host(h, tuple(port(i, k) for k in range(ports_per_host))) for i, h in enumerate(ids)]
    return Fabric([panel], host_list, fabric_id)
