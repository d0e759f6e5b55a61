"""What a runtime that interprets MSCCL XML accepts and how it selects an algorithm: one `RuntimeProfile`
per runtime (executor.py, rccl.py, legacy.py), each field a fact read from the runtime's source, cited there
file:line. The checker (services.compiler.check) enforces exactly these fields; the compiler (services.compiler.msccl,
fit) stays within them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["RuntimeProfile", "STEP_TYPES", "SEND_TYPES", "RECV_TYPES"]

STEP_TYPES = frozenset({"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"})
SEND_TYPES = frozenset({"s", "rcs", "rrs", "rrcs"})
RECV_TYPES = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})


@dataclass(frozen=True)
class RuntimeProfile:
    """The limits and rules of one MSCCL XML runtime (see the module of each runtime for the sources).

    Selection: the runtime uses an algorithm for a call of `nbytes` (the larger buffer's size: count x
    element size x nranks for allgather / reduce-scatter / alltoall) when `ngpus` equals the ranks, the
    collective matches, the element count times the size multiplier is a multiple of `nchunksperloop`,
    the in-place/out-of-place mode is declared, and min_bytes <= nbytes <= / < max_bytes (see
    `selects`)."""

    name: str
    title: str
    source: str                                 # repository @ commit the facts were read from
    collectives: dict[str, str]                 # our collective -> the runtime's `coll` spelling
    step_types: frozenset[str]
    algo_required: tuple[str, ...]              # <algo> attributes the parser fails without
    algo_written: tuple[str, ...]               # <algo> attributes our emitter writes, in this order
    reads_outofplace: bool                      # outofplace flag read (else one file serves one mode)
    max_steps: int                              # a tb's step index s (nops included) < max_steps
    max_tbs: int                                # tb ids < max_tbs
    max_channels: int                           # chan < max_channels (the parser lets chan == it through,
                                                # which indexes past its channel array)
    max_bytes_zero_unbounded: bool              # maxBytes="0": no upper bound (else: never selected)
    max_bytes_inclusive: bool                   # nbytes <= maxBytes (else nbytes < maxBytes)
    default_max_bytes: int | None               # maxBytes when the attribute is absent (None: required)
    max_algorithms: int                         # algorithm files one process loads
    io_chunks_checked: bool                     # i_chunks/o_chunks must agree with nchunksperloop
    comm_count_min: int                         # smallest cnt of a step that sends or receives
    scratch_from_max_bytes: bool                # scratch allocated at init from maxBytes
    max_dep_tb: int = 127                       # depid is stored as int8
    max_count: int = 72                         # 0 <= cnt < max_count (MSCCL_MAX_COUNT)
    max_tbs_per_channel: int = 32               # sending / receiving tbs per channel
    max_offset: int = 32767                     # chunk offsets are int16
    max_dep_step: int = 32767                   # deps is int16
    max_parser_nodes: int = 4096                # parsed nodes per rank (algo, gpus, own tbs and steps)
    max_children: int = 1024                    # children of one element (gpus, tbs, steps)
    max_attrs: int = 16                         # attributes per element; later ones are ignored
    max_name_chars: int = 253                   # element and attribute names
    max_value_chars: int = 255                  # attribute values
    max_reduce_fusion: int = 16                 # consecutive `re` steps fused into one
    nccl_steps: int = 8                         # buffer slots per connection
    simple_chunk_steps: int = 4                 # slots one Simple-protocol message takes
    chain_rule: bool = True                     # nop dependencies must be followed by a step with its own
    loading: tuple[str, ...] = field(default=(), compare=False)   # how a user loads files (docs)

    # ----- derived ------------------------------------------------------------------------------------
    def with_overrides(self, **kw) -> "RuntimeProfile":
        """A copy with some limits changed (None values ignored), e.g. max_steps for a build of the
        executor with another MSCCL_MAX_NUM_STEPS."""
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(self, **kw) if kw else self

    @property
    def dialect(self) -> str:           # the name callers used before profiles existed
        return self.name

    @property
    def reducescatter(self) -> str:
        return self.collectives["reducescatter"]

    def coll_name(self, collective: str) -> str:
        try:
            return self.collectives[collective]
        except KeyError:
            raise ValueError(f"the {self.name} runtime has no {collective!r} collective; it knows "
                             f"{', '.join(sorted(self.collectives))}") from None

    def collective_of(self, coll: str) -> str | None:
        """Our collective name for the runtime's `coll` spelling (None if the runtime does not know it)."""
        for ours, theirs in self.collectives.items():
            if theirs == coll:
                return ours
        return None

    def fifo_messages(self, proto: str) -> int:
        """Messages of at most maxAllowedCount chunks a connection buffers: NCCL_STEPS slots, a Simple
        message takes MSCCL_CHUNKSTEPS of them, LL and LL128 one."""
        return self.nccl_steps // (self.simple_chunk_steps if proto == "Simple" else 1)

    def selects(self, nbytes: int, min_bytes: int, max_bytes: int | None) -> bool:
        """Whether a file with this size window is used for a call of `nbytes` (other conditions aside)."""
        if max_bytes is None:
            if self.default_max_bytes is None:
                return False
            max_bytes = self.default_max_bytes
        if nbytes < min_bytes:
            return False
        if max_bytes == 0 and self.max_bytes_zero_unbounded:
            return True
        return nbytes <= max_bytes if self.max_bytes_inclusive else nbytes < max_bytes

    def window_problem(self, min_bytes: int, max_bytes: int | None) -> str | None:
        """Why a size window selects no message size (None when some size selects it)."""
        if min_bytes < 0 or (max_bytes is not None and max_bytes < 0):
            return "minBytes and maxBytes must not be negative"
        eff = self.default_max_bytes if max_bytes is None else max_bytes
        if eff is None:
            return "maxBytes is required"
        if eff == 0 and self.max_bytes_zero_unbounded:
            return None
        if eff == 0:
            return (f"maxBytes=\"0\": the {self.name} runtime selects an algorithm only for sizes below maxBytes, so "
                    f"this file is never used")
        if min_bytes > eff or (min_bytes == eff and not self.max_bytes_inclusive):
            return f"minBytes={min_bytes} and maxBytes={eff} leave no message size that selects this file"
        return None
