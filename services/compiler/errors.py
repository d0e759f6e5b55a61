"""Errors and reports of the schedule compilers, validators and simulators."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


class CompileError(ValueError):
    """A schedule cannot be lowered for the target runtime.

    `limit` names the violated rule (e.g. "max_steps_per_tb", "max_count", "max_channels"), `value` the
    offending value and `maximum` the runtime's bound (None when the error is not about a numeric limit).
    """

    def __init__(self, message: str, *, limit: str | None = None, value=None, maximum=None,
                 gpu: int | None = None, tb: int | None = None):
        super().__init__(message)
        self.limit, self.value, self.maximum, self.gpu, self.tb = limit, value, maximum, gpu, tb
        # a failed fit search's (services.compiler.fit.search): its attempts, whether its deadline ended it,
        # and a refused candidate's lower bound on steps per thread block
        self.attempts: list[dict] = []
        self.timed_out = False
        self.lower_bound = None


@dataclass
class Finding:
    """One problem found in an XML file.

    kind: syntax | lexical (the runtime's tokenizer) | structure | selection (the file never runs) | bounds |
          limit | mismatch | deadlock | race | result
    gpu/tb/step (MSCCL) or rank/instr (oneCCL, reported in `gpu` and `step`, tb None) locate it.
    """

    kind: str
    message: str
    gpu: int | None = None
    tb: int | None = None
    step: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


@dataclass
class CheckReport:
    """Result of `check_xml`: structural checks, then (when they pass) a CPU simulation on random data.

    `comm_steps` is the number of communication steps the XML realizes: the longest chain of messages
    in its happens-before order (each message adds one, local work adds none). For our compilers it
    equals the schedule's step count whenever every step forwards data received in the step before (BFB
    and the expansions); MSCCL has no global step barrier, so for pipelined schedules (e.g. a chunked
    double binary tree) it can be shorter. oneCCL syncs every step and always realizes the step count. `steps` is the most XML steps in one thread block (MSCCL, nops
    included) or the most instructions of one rank (oneCCL); `xml_steps` all steps of the file (MSCCL).
    `dialect` is the runtime whose profile was applied.
    """

    ok: bool
    fmt: str
    collective: str | None = None
    ngpus: int | None = None
    chunks_per_loop: int | None = None
    dialect: str | None = None
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    simulated: list[str] = field(default_factory=list)       # buffer modes simulated: in-place / out-of-place
    comm_steps: int | None = None
    steps: int | None = None
    threadblocks: int | None = None                           # most thread blocks on one gpu (MSCCL)
    messages: int | None = None
    instructions: int | None = None
    xml_steps: int | None = None

    @property
    def runtime(self) -> str | None:
        return self.dialect

    @property
    def error(self) -> Finding | None:
        return self.errors[0] if self.errors else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["error"] = self.error.as_dict() if self.error else None
        return d

    def raise_if_invalid(self) -> "CheckReport":
        if not self.ok:
            raise XmlInvalid(self)
        return self


class XmlInvalid(ValueError):
    def __init__(self, report: CheckReport):
        self.report = report
        super().__init__(str(report.error) if report.error else "invalid XML")
