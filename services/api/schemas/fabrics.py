"""Fabric and panel bodies (DESIGN 4.8): a fabric's document or layout shortcut, its summary and cost,
a panel's state as its agent reports it, and a look-ahead activation.
"""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


from .common import HostId, INT32_MAX, Ident, Input, MAX_PANEL_PORTS

__all__ = ["ActivationOut", "AltFibersIn", "CrossConnectIn", "FabricCostOut", "FabricDocument", "FabricLayout",
           "FabricSummary", "FailedConnectionIn", "FiberIn", "HostIn", "HostPortIn", "MAX_FABRIC_HOSTS",
           "MAX_FABRIC_HOST_PORTS", "PanelConfigOut", "PanelCrossConnect", "PanelDiffOut", "PanelIn", "PanelOut",
           "PanelPlanes", "PanelProfileOut", "PanelProfileIn", "PanelRevisionOut", "PanelStateIn", "PanelStateOut"]


class PanelOut(BaseModel):
    """A panel's desired configuration against what its agent last reported."""

    id: str
    fabric_id: str
    kind: str
    ports: int
    version: int = Field(description="the latest config version")
    version_reason: str
    version_at: datetime
    applied_version: int = Field(description="the version the agent last reported applied (0: none yet)")
    in_sync: bool = Field(description="applied_version == version and the last report did not fail")
    status: str | None = Field(description="the last report's status (applied, failed); null before any")
    message: str | None
    reported_at: datetime | None
    cross_connects: int = Field(description="cross-connects in the latest version")
    pending_add: int = Field(description="cross-connects the latest version adds to what the agent reported")
    pending_remove: int = Field(description="reported cross-connects the latest version no longer has")
    plans: dict[str, int] = Field(description="active plans using this panel -> the version carrying their "
                                              "cross-connects")


MAX_FABRIC_HOSTS = 16384
MAX_FABRIC_HOST_PORTS = 1 << 16


class PanelProfileIn(Input):
    """Overrides of the kind's device profile (services.fabric.devices; defaults from TopoOpt Table 1)."""

    model: str | None = Field(default=None, min_length=1, max_length=200)
    max_ports: int | None = Field(default=None, strict=True, ge=1, le=1 << 20)
    reconfiguration_s: float | None = Field(default=None, ge=0, le=7 * 86400, description="one reconfiguration "
                                            "(a robot batch on a patch panel)")
    robot_batch_size: int | None = Field(default=None, strict=True, ge=1, le=1 << 20, description="patch panels: "
                                         "cross-connect changes per reconfiguration_s")
    insertion_loss_db: float | None = Field(default=None, ge=0, le=100)
    insertion_loss_max_db: float | None = Field(default=None, ge=0, le=100)
    cost_per_port_usd: float | None = Field(default=None, ge=0, le=1e9)


class FabricLayout(Input):
    """Shortcut for the common cablings: `planes` (host port k on panel plane{k}, port = host index) or
    `shared` (every host port on one panel); `lookahead` adds the second side of a 1x2 switch per host port
    (planes: panels {prefix}{k}-alt, 2d in all; shared: the panel's second half)."""

    id: Ident
    layout: Literal["planes", "shared"]
    hosts: Annotated[int, Field(strict=True, ge=1, le=MAX_FABRIC_HOSTS)] | Annotated[
        list[HostId], Field(min_length=1, max_length=MAX_FABRIC_HOSTS)] = Field(
        description=f"a host count, or the host ids (at most {MAX_FABRIC_HOSTS})")
    ports_per_host: int = Field(strict=True, ge=1, le=64)
    kind: Literal["patch_panel", "ocs"] = "patch_panel"
    panel_prefix: str | None = Field(default=None, max_length=50, pattern=r"^[A-Za-z0-9_.-]+$", description=(
        "panel ids are '{prefix}{k}' (planes) or '{prefix}0' (shared); without it 'plane{k}' and 'panel0'. Panel "
        "ids are global: a second fabric registered with a layout needs a prefix of its own"))
    lookahead: bool = Field(default=False, description="active and look-ahead planes (TopoOpt App. C)")
    profile: PanelProfileIn | None = Field(default=None, description="overrides of every panel's device profile "
                                           "(a panel may have at most the profile's max_ports ports: a planes "
                                           "panel has one per host, the shared panel one per host port)")

    @model_validator(mode="after")
    def _bounded(self):
        count = self.hosts if isinstance(self.hosts, int) else len(self.hosts)
        if count * self.ports_per_host > MAX_FABRIC_HOST_PORTS:
            raise ValueError(f"{count} hosts x {self.ports_per_host} ports is {count * self.ports_per_host} host "
                             f"ports; a fabric has at most {MAX_FABRIC_HOST_PORTS}")
        return self


class FiberIn(Input):
    panel: Ident
    port: int = Field(strict=True, ge=0, lt=MAX_PANEL_PORTS)


class AltFibersIn(Input):
    """The second side of the host port's 1x2 switch (its look-ahead plane when the first side is active)."""

    tx: FiberIn
    rx: FiberIn


class HostPortIn(Input):
    port: int | None = Field(default=None, strict=True, ge=0, le=63)
    tx: FiberIn
    rx: FiberIn
    alt: AltFibersIn | None = Field(default=None, description="look-ahead planes: every host port has one or none does")


class HostIn(Input):
    id: HostId
    ports: list[HostPortIn] = Field(min_length=1, max_length=64)


class PanelIn(Input):
    id: Ident
    kind: Literal["patch_panel", "ocs"]
    ports: int = Field(strict=True, ge=1, le=MAX_PANEL_PORTS, description="at most its device profile's max_ports "
                       "(patch_panel 1008, ocs 384, or the profile override's)")
    profile: PanelProfileIn | None = None


class FabricDocument(Input):
    """The full fabric: panels, and every host port's tx and rx fiber with the panel port it lands on."""

    id: Ident = "fabric"
    ports_per_host: int | None = Field(default=None, strict=True, ge=1, le=64)
    panels: list[PanelIn] = Field(min_length=1, max_length=1024)
    hosts: list[HostIn] = Field(min_length=1, max_length=MAX_FABRIC_HOSTS)

    @model_validator(mode="after")
    def _bounded(self):
        total = sum(len(h.ports) for h in self.hosts)
        if total > MAX_FABRIC_HOST_PORTS:
            raise ValueError(f"{total} host ports; a fabric has at most {MAX_FABRIC_HOST_PORTS}")
        return self


class FabricSummary(BaseModel):
    id: str
    hosts: int
    ports_per_host: int
    panels: list[dict] = Field(description="id, kind, ports, the latest config version and the device profile")
    reserved: dict[str, str] = Field(description="host id -> the plan holding it (its active plane)")
    lookahead: bool = Field(default=False, description="the hosts' ports have 1x2 switches (active and look-ahead "
                                                       "planes)")
    active_sides: dict[str, int] = Field(default_factory=dict, description="hosts whose 1x2 switches point at side "
                                         "1 (every other host: side 0)")
    lookahead_reserved: dict[str, str] = Field(default_factory=dict, description="host id -> the plan provisioned "
                                               "on its look-ahead plane")
    spec: dict | None = Field(default=None, description="the fabric document (GET /v1/fabrics/{id} only)")


class CrossConnectIn(BaseModel):
    """One cross-connect on the panel; other keys (the config's tx_host, plan_id, ...) are ignored."""

    model_config = ConfigDict(extra="ignore")

    ingress: int = Field(strict=True, ge=0, lt=MAX_PANEL_PORTS)
    egress: int = Field(strict=True, ge=0, lt=MAX_PANEL_PORTS)


class FailedConnectionIn(Input):
    """A failed cross-connect {ingress, egress}, or a failed port: only its ingress or only its egress."""

    ingress: int | None = Field(default=None, strict=True, ge=0, lt=MAX_PANEL_PORTS)
    egress: int | None = Field(default=None, strict=True, ge=0, lt=MAX_PANEL_PORTS)

    @model_validator(mode="after")
    def _one(self):
        if self.ingress is None and self.egress is None:
            raise ValueError("name the failed cross-connect's ingress and egress, or one failed port")
        return self


class PanelStateIn(Input):
    applied_version: int = Field(strict=True, ge=0, le=INT32_MAX, description="the config version the agent "
                                 "applied (status applied or degraded) or tried to apply (status failed)")
    status: Literal["applied", "failed", "degraded"] = Field(description="degraded: the version is applied but the "
                                                             "cross-connects in `failed` carry no light")
    message: str | None = Field(default=None, max_length=2000)
    sequence: int | None = Field(default=None, strict=True, ge=0, le=2 ** 63 - 1, description=(
        "the agent's report counter, increasing with every report it sends (kept across restarts, or the time "
        "in ms): a report of the same version whose sequence is not above the stored one's is a replay (409, "
        "nothing stored). Without it, reports of one version count in the order they arrive"))
    connections: list[CrossConnectIn] | None = Field(default=None, max_length=MAX_PANEL_PORTS, description=(
        "the cross-connects now on the panel, [{ingress, egress}], each port in range and used once; with "
        "status applied or degraded they must be exactly the acknowledged version's (omitted: they are)"))
    failed: list[FailedConnectionIn] | None = Field(default=None, max_length=MAX_PANEL_PORTS, description=(
        "status degraded: the cross-connects of the version that failed, or single failed ports; each plan they "
        "carry gets a new revision"))

    @model_validator(mode="after")
    def _failed(self):
        if (self.status == "degraded") != bool(self.failed):
            raise ValueError("status degraded needs the failed connections, and only status degraded has them")
        return self


class PanelCrossConnect(BaseModel):
    """One cross-connect of a panel config (DESIGN 4.6): the ports it joins and, for a plan's connection, the
    arc it carries (tail -> head on lane, from tx_host's tx_port to rx_host's rx_port)."""

    model_config = ConfigDict(extra="allow")

    ingress: int
    egress: int
    side: int | None = Field(default=None, description="the side of the hosts' 1x2 switches it serves (config "
                                                       "cross-connects only)")
    plane: Literal["active", "lookahead"] | None = Field(default=None, description="whether that side is the "
                                                         "hosts' active plane (config cross-connects only)")
    plan_id: str | None = None
    arc: int | None = None
    tail: int | None = None
    head: int | None = None
    lane: int | None = None
    tx_host: str | None = None
    tx_port: int | None = None
    rx_host: str | None = None
    rx_port: int | None = None
    loopback: bool | None = None


class PanelPlanes(BaseModel):
    """The config's cross-connects counted by the plane they serve."""

    active: int
    lookahead: int


class PanelDiffOut(BaseModel):
    """From what the agent last reported to the latest version: cross-connects to remove and to add."""

    panel: str | None
    changes: int = Field(description="len(remove) + len(add)")
    remove: list[PanelCrossConnect]
    add: list[PanelCrossConnect]
    unchanged: list[PanelCrossConnect]
    kept: list[PanelCrossConnect]


class PanelProfileOut(BaseModel):
    """The panel's device profile (services.fabric.devices; TopoOpt Table 1), with the fabric's overrides."""

    kind: str
    model: str
    max_ports: int
    reconfiguration_s: float
    robot_batch_size: int | None
    insertion_loss_db: float
    insertion_loss_max_db: float
    cost_per_port_usd: float
    source: str


class PanelConfigOut(BaseModel):
    """GET /v1/panels/{panel_id}/config: the panel's latest config version and the diff from its last report."""

    panel: str
    fabric_id: str
    kind: str
    ports: int
    profile: PanelProfileOut
    version: int = Field(description="the config version (also the ETag)")
    digest: str = Field(description="sha256 of the sorted (ingress, egress) pairs")
    reason: str
    cross_connects: list[PanelCrossConnect]
    planes: PanelPlanes
    diff: PanelDiffOut
    applied_version: int = Field(description="the version the agent last reported applied (0: none yet)")
    reported_version: int
    reported_status: Literal["applied", "failed", "degraded"] | None


class PanelRevisionOut(BaseModel):
    """A plan revision a panel report created (a degraded report's failure, or a completed repair)."""

    plan_id: str
    number: int
    kind: str
    status: str
    url: str


class PanelStateOut(BaseModel):
    """PUT /v1/panels/{panel_id}/state: the report as stored and what it changed."""

    panel: str
    applied_version: int
    latest_version: int
    status: Literal["applied", "failed", "degraded"]
    fabric_ready_plans: list[str] = Field(description="plans that became fabric_ready with this report")
    revisions: list[PanelRevisionOut]


class ActivationOut(BaseModel):
    plan_id: str
    fabric_id: str
    side: int = Field(description="the side of the 1x2 switches now active on the plan's hosts")
    switches: dict[str, int] = Field(description="host id -> the switch position to set")


class FabricCostOut(BaseModel):
    link_gbps: float
    price_row_gbps: int = Field(description="the row of TopoOpt Table 2 used")
    lanes: int = Field(description="100 Gbps lanes per link above 200 Gbps (else 1)")
    fiber_m: float
    items: list[dict] = Field(description="item, count, unit_usd, usd")
    total_usd: float
    per_host_usd: float
    sources: list[str]
