"""Device profiles: what a panel of each kind is, as TopoOpt reports it (TopoOpt Table 1 and
App. B), and how long a change of its cross-connects takes.

- **patch_panel**: a robotic patch panel (Telescent NTM G4): 1008 duplex ports, insertion loss < 0.5 dB,
  about $100 per port; a robotic arm moves one transmit fiber onto one receive fiber, and a reconfiguration
  takes "several minutes" (TopoOpt App. B, refs [43], [88]).
- **ocs**: a 3D-MEMS optical circuit switch (Polatis Series 7000, 384 x 384; CALIENT Edge 640 also cited):
  about 10 ms to reconfigure every port at once, insertion loss 1.5-2.7 dB, about $520 per port (TopoOpt
  Table 1 and App. B, refs [2], [41]).

How the reconfiguration time is estimated (`DeviceProfile.reconfiguration_time_s`): an OCS moves all its
mirrors at once, so any change takes `reconfiguration_s`. A patch panel's robot moves fibers one after
another; TopoOpt gives only "several minutes" for a job's reconfiguration on its 12-server prototype (d = 4:
48 cross-connects). The default profile therefore counts `robot_batch_size` = 48 cross-connect changes per
`reconfiguration_s` = 300 s (5 minutes) and a change of k cross-connects as ceil(k / 48) such batches. These
two numbers are assumptions drawn from that one statement, not vendor data: a fabric document may override
any field of a panel's profile (`profile` in the panel's entry).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

__all__ = ["DeviceProfile", "PROFILES", "PROFILE_FIELDS", "profile_for", "ProfileError"]


class ProfileError(ValueError):
    """A profile override with an unknown field or a value out of range."""


@dataclass(frozen=True)
class DeviceProfile:
    """The facts of one kind of panel (TopoOpt Table 1). `robot_batch_size` is None for devices that switch
    every port at once (OCS)."""

    kind: str
    model: str
    max_ports: int
    reconfiguration_s: float
    robot_batch_size: int | None
    insertion_loss_db: float
    insertion_loss_max_db: float
    cost_per_port_usd: float
    source: str

    def reconfiguration_time_s(self, changes: int) -> float:
        """Seconds until `changes` cross-connect additions and removals are in place (0 for none).

        >>> PROFILES["ocs"].reconfiguration_time_s(200)
        0.01
        >>> PROFILES["patch_panel"].reconfiguration_time_s(49)      # two robot batches of up to 48
        600.0
        """
        if changes <= 0:
            return 0.0
        if self.robot_batch_size is None:
            return self.reconfiguration_s
        return math.ceil(changes / self.robot_batch_size) * self.reconfiguration_s

    def devices_for(self, ports: int) -> int:
        """How many devices of this model a panel of `ports` ports takes (a panel larger than one device is
        several devices side by side)."""
        return max(1, math.ceil(ports / self.max_ports))

    def to_dict(self) -> dict:
        return asdict(self)


PROFILES: dict[str, DeviceProfile] = {
    "patch_panel": DeviceProfile(
        kind="patch_panel", model="Telescent NTM G4 robotic patch panel", max_ports=1008,
        reconfiguration_s=300.0, robot_batch_size=48, insertion_loss_db=0.5, insertion_loss_max_db=0.5,
        cost_per_port_usd=100.0,
        source="TopoOpt (NSDI'23) Table 1 and App. B: 1008 duplex ports, < 0.5 dB, ~$100/port, reconfiguration "
               "'several minutes' (taken as 300 s per batch of 48 cross-connects, the prototype's 12 x 4)"),
    "ocs": DeviceProfile(
        kind="ocs", model="3D-MEMS optical circuit switch (Polatis Series 7000)", max_ports=384,
        reconfiguration_s=0.010, robot_batch_size=None, insertion_loss_db=1.5, insertion_loss_max_db=2.7,
        cost_per_port_usd=520.0,
        source="TopoOpt (NSDI'23) Table 1 and App. B: 384 duplex ports, ~10 ms, 1.5-2.7 dB, ~$520/port"),
}

# fields a fabric document may override per panel, with their bounds
PROFILE_FIELDS = {"model": (str, None, None), "max_ports": (int, 1, 1 << 20),
                  "reconfiguration_s": (float, 0.0, 7 * 86400.0), "robot_batch_size": (int, 1, 1 << 20),
                  "insertion_loss_db": (float, 0.0, 100.0), "insertion_loss_max_db": (float, 0.0, 100.0),
                  "cost_per_port_usd": (float, 0.0, 1e9)}


def profile_for(kind: str, overrides: dict | None = None) -> DeviceProfile:
    """The profile of a panel kind, with the fabric document's overrides applied.

    >>> profile_for("patch_panel", {"robot_batch_size": 8, "reconfiguration_s": 60}).reconfiguration_time_s(9)
    120.0
    """
    try:
        base = PROFILES[kind]
    except KeyError:
        raise ProfileError(f"no device profile for kind {kind!r} (known: {', '.join(PROFILES)})") from None
    if not overrides:
        return base
    if not isinstance(overrides, dict):
        raise ProfileError("a profile override is an object of profile fields")
    changes = {}
    for key, value in overrides.items():
        if key not in PROFILE_FIELDS:
            raise ProfileError(f"profile.{key}: unknown field (known: {', '.join(PROFILE_FIELDS)})")
        typ, lo, hi = PROFILE_FIELDS[key]
        if typ is str:
            if not isinstance(value, str) or not 0 < len(value) <= 200:
                raise ProfileError(f"profile.{key}: a name of 1 to 200 characters")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (typ is int and value != int(value)):
                raise ProfileError(f"profile.{key}: must be {'an integer' if typ is int else 'a number'}")
            if not (math.isfinite(value) and lo <= value <= hi):
                raise ProfileError(f"profile.{key}: must be between {lo:g} and {hi:g}, got {value!r}")
            value = typ(value)
        changes[key] = value
    if base.robot_batch_size is None and "robot_batch_size" in changes:
        raise ProfileError("profile.robot_batch_size: an OCS switches every port at once (no robot)")
    out = replace(base, **changes)
    if out.insertion_loss_max_db < out.insertion_loss_db:
        out = replace(out, insertion_loss_max_db=out.insertion_loss_db)
    return out
