"""Runtime limits and dialects of the MSCCL XML interpreters (reference section 2).

executor  Azure/msccl-executor-nccl (current; `coll="reducescatter"`; MSCCL_MAX_NUM_STEPS = 64 in the
          stored msccl_struct.h; needs outofplace/minBytes/maxBytes; its hand-written parser rejects an
          XML declaration, tabs, single quotes and attributes split over lines).
rccl      RCCL's built-in MSCCL (same parser family as the executor, `reducescatter`, 256 steps).
legacy    microsoft/msccl research prototype (and TACCL-derived runtimes): `coll="reduce_scatter"`,
          256 steps, `name` required.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RuntimeLimits:
    dialect: str
    reducescatter: str          # spelling of the reduce-scatter collective in `coll`
    max_steps: int = 64         # steps per thread block, nops included (MSCCL_MAX_NUM_STEPS)
    max_count: int = 72         # cnt must satisfy 0 <= cnt < max_count (MSCCL_MAX_COUNT)
    max_channels: int = 32      # channel ids 0..max_channels-1 (MAXCHANNELS)
    max_tbs_per_channel: int = 32   # senders and receivers per channel (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL)
    max_tbs: int = 128          # thread blocks per gpu (dependentBid is an int8)
    max_offset: int = 32767     # chunk offsets are int16 in the device structs
    max_parser_nodes: int = 4096    # MAX_NODES: algo + gpus + this rank's tbs and steps must stay below
    max_subs: int = 1024        # MAX_SUBS children per element
    max_attrs: int = 16         # MAX_ATTR_COUNT per element (extra ones are ignored)
    max_reduce_fusion: int = 16
    requires: tuple[str, ...] = ()
    strict_lexer: bool = False  # the executor's own XML tokenizer
    nop_chain_rule: bool = False    # dependencies carried by nops must be followed by a step with its own

    def with_overrides(self, **kw) -> "RuntimeLimits":
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(self, **kw) if kw else self


_COMMON = ("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "inplace")

DIALECTS: dict[str, RuntimeLimits] = {
    "executor": RuntimeLimits("executor", "reducescatter", max_steps=64,
                              requires=_COMMON + ("outofplace", "minBytes", "maxBytes"), strict_lexer=True,
                              nop_chain_rule=True),
    "rccl": RuntimeLimits("rccl", "reducescatter", max_steps=256,
                          requires=_COMMON + ("outofplace", "minBytes", "maxBytes"), strict_lexer=True,
                          nop_chain_rule=True),
    "legacy": RuntimeLimits("legacy", "reduce_scatter", max_steps=256, requires=_COMMON + ("name",)),
}

COLL_NAMES = {"allgather": "allgather", "allreduce": "allreduce", "reducescatter": "reducescatter",
              "reduce_scatter": "reducescatter"}


def limits_for(dialect: str | RuntimeLimits) -> RuntimeLimits:
    if isinstance(dialect, RuntimeLimits):
        return dialect
    try:
        return DIALECTS[dialect]
    except KeyError:
        raise ValueError(f"unknown MSCCL dialect {dialect!r}; known: {', '.join(DIALECTS)}") from None
