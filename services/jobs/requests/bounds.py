"""What every request body shares, below the API so the jobs read requests back with the same rules
(DESIGN section 7): the strict `Input` base, the units' bounds (bytes, weights, bandwidth, latency) and the
names a request may use, each spelled once by its enum (collectives: services.synthesis.schedule.ir.Collective;
runtimes: services.compiler.runtimes.names.Runtime).
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.compiler.runtimes.names import Runtime
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective

__all__ = ["Bytes", "CollectiveName", "HostId", "Input", "MAX_ALPHA_US", "MAX_BYTES", "MAX_GBPS", "MAX_WEIGHT",
           "MIN_GBPS", "MIN_LINK_GBPS", "RuntimeName", "ScheduleCollective", "Weight"]

CollectiveName = Literal[tuple(c.value for c in ALLGATHER_FAMILY)]          # allgather, reducescatter, allreduce
ScheduleCollective = Literal[tuple(c.value for c in Collective)]            # and alltoall
RuntimeName = Literal[tuple(r.value for r in Runtime)]                      # executor, rccl, legacy, oneccl
MAX_BYTES = 1 << 50                 # 1 PiB: every time computed from it stays a finite float
MAX_WEIGHT = 1e6
MIN_GBPS = 1e-3                     # 1 Mbit/s: a host's egress or one link; below it no time is a finite float
MIN_LINK_GBPS = MIN_GBPS            # one link's own bandwidth (an edge that prices its link)
MAX_GBPS = 1e6                      # 1 Pbit/s
MAX_ALPHA_US = 1e6                  # 1 s per step
Bytes = Annotated[int, Field(ge=1, le=MAX_BYTES)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]
HostId = Annotated[str, Field(min_length=1, max_length=100)]


class Input(BaseModel):
    """A request body: unknown fields are errors, numbers are finite (no NaN or Infinity), and types are strict
    (pydantic strict mode): `true` is not the number 1, "16" is not 16, 1.0 is not an integer."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
