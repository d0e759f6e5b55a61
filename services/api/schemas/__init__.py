"""Request and response bodies (pydantic v2), one module per resource. Units are in the field names (DESIGN
section 7).

    common      the strict `Input` base, bounds and names every body uses; errors, health, statistics
    plans       a plan's request and the plan (topology, schedules, predicted times, all-to-all, link loads)
    training    a training plan's iteration on every topology (one GPU per node, or hybrid parallelism)
    topologies  topology evaluations and the topology a plan chose
    frontiers   the Pareto frontier of (N, d)
    compiles    an on-demand compile
    fabrics     fabrics, panels and look-ahead activations
    revisions   failure reports and plan revisions

The routes import from this package; every name below is one of those modules'.
"""
from __future__ import annotations

from .common import (CollectiveName, ErrorOut, FieldError, HealthOut, Input, PlanStatus, Problem, Progress, ReadyOut,
                     RuntimeName, ScheduleCollective, StatsOut, ValidationErrorOut)
from .compiles import CompileAccepted
from .fabrics import (ActivationOut, FabricCostOut, FabricDocument, FabricLayout, FabricSummary, PanelConfigOut,
                      PanelOut, PanelStateIn, PanelStateOut)
from .frontiers import FrontierEntry, FrontierOut
from .plans import (MAX_PLAN_NODES, LinkLoadsOut, PlanAccepted, PlanEventOut, PlanOut, PlanRequest, TrainingWorkload,
                    Workload)
from .revisions import FailureReport, RevisionAccepted, RevisionOut, RevisionSummary
from .topologies import EvaluateOut, EvaluateRequest, EvaluationAccepted, EvaluationOut, TopologyOut

__all__ = ["ActivationOut", "CollectiveName", "CompileAccepted", "ErrorOut", "Problem", "EvaluateOut", "EvaluateRequest",
           "EvaluationAccepted", "EvaluationOut", "FabricCostOut", "FabricDocument", "FabricLayout", "FabricSummary",
           "FailureReport", "FieldError", "FrontierEntry", "FrontierOut", "HealthOut", "Input", "LinkLoadsOut",
           "MAX_PLAN_NODES", "PanelConfigOut", "PanelOut", "PanelStateIn", "PanelStateOut", "PlanAccepted",
           "PlanEventOut", "PlanOut", "PlanRequest", "PlanStatus", "Progress", "ReadyOut", "RevisionAccepted",
           "RevisionOut", "RevisionSummary", "RuntimeName", "ScheduleCollective", "StatsOut", "TopologyOut",
           "TrainingWorkload", "ValidationErrorOut", "Workload"]
