"""Runtime profiles: one module per runtime that interprets MSCCL XML, each limit citing the source line it
comes from. `PROFILES` maps the runtime names accepted everywhere (CLI --runtime, API ?runtime=, plan
`runtimes`) to their profiles.
"""
from __future__ import annotations

from .executor import EXECUTOR
from .legacy import LEGACY
from .names import DEFAULT_RUNTIME, MSCCL_RUNTIMES, Format, Runtime
from .profile import RECV_TYPES, SEND_TYPES, STEP_TYPES, RuntimeProfile
from .rccl import RCCL

__all__ = ["DEFAULT_RUNTIME", "Format", "MSCCL_RUNTIMES", "PROFILES", "Runtime", "RuntimeProfile", "profile_for",
           "EXECUTOR", "RCCL", "LEGACY", "STEP_TYPES",
           "SEND_TYPES", "RECV_TYPES"]

PROFILES: dict[str, RuntimeProfile] = {p.name: p for p in (EXECUTOR, RCCL, LEGACY)}
assert tuple(PROFILES) == tuple(r.value for r in MSCCL_RUNTIMES)        # a profile per MSCCL runtime, named once


def profile_for(runtime: str | RuntimeProfile) -> RuntimeProfile:
    """The profile of a runtime name (executor, rccl, legacy), or the profile itself."""
    if isinstance(runtime, RuntimeProfile):
        return runtime
    try:
        return PROFILES[runtime]
    except KeyError:
        raise ValueError(f"unknown MSCCL runtime {runtime!r}; known: {', '.join(PROFILES)}") from None
