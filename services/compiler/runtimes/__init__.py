"""Runtime profiles: one module per runtime that interprets MSCCL XML, each limit citing the source line it
comes from. `PROFILES` maps the runtime names accepted everywhere (CLI --runtime, API ?runtime=, plan
`runtimes`) to their profiles.
"""
from __future__ import annotations

from .executor import EXECUTOR
from .legacy import LEGACY
from .profile import RECV_TYPES, SEND_TYPES, STEP_TYPES, RuntimeProfile
from .rccl import RCCL

__all__ = ["PROFILES", "RuntimeProfile", "profile_for", "EXECUTOR", "RCCL", "LEGACY", "STEP_TYPES",
           "SEND_TYPES", "RECV_TYPES"]

PROFILES: dict[str, RuntimeProfile] = {p.name: p for p in (EXECUTOR, RCCL, LEGACY)}


def profile_for(runtime: str | RuntimeProfile) -> RuntimeProfile:
    """The profile of a runtime name (executor, rccl, legacy), or the profile itself."""
    if isinstance(runtime, RuntimeProfile):
        return runtime
    try:
        return PROFILES[runtime]
    except KeyError:
        raise ValueError(f"unknown MSCCL runtime {runtime!r}; known: {', '.join(PROFILES)}") from None
