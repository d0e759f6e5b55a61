"""Fabric model: hosts, ports, patch panels / OCS; topology -> port assignment -> cross-connects; sharding.

Pure library (numpy, scipy, networkx-free; no web, DB or Celery imports). See model.py (the physical
fabric), assign.py (port assignment, Konig split), crossconnect.py (per-panel configs and diffs) and
state.py (reservations).
"""
from .assign import (Assignment, AssignmentError, assign_ports, konig_split, split_permutations)
from .crossconnect import ConfigError, PanelDiff, config_digest, diff_connections, panel_configs
from .model import (PANEL_KINDS, CablingError, Fabric, FabricError, Fiber, Host, HostPort, Panel,
                    planes_fabric, shared_panel_fabric)
from .state import FabricState, HostBusyError, Reservation, ReservationError

__all__ = [
    "PANEL_KINDS", "Assignment", "AssignmentError", "CablingError", "ConfigError", "Fabric", "FabricError",
    "FabricState", "Fiber", "Host", "HostBusyError", "HostPort", "Panel", "PanelDiff", "Reservation",
    "ReservationError", "assign_ports", "config_digest", "diff_connections", "konig_split", "panel_configs",
    "planes_fabric", "shared_panel_fabric", "split_permutations",
]
