"""The summary every schedule-producing command returns (DESIGN section 5: `fabricplan bfb --json`)."""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.schedule.cost import is_moore_optimal, moore_steps, optimal_tau, tau_lower_bound
from services.synthesis.schedule.ir import Collective
from services.synthesis.topology.graph import Topology
from services.synthesis.schedule.verify import VerificationReport


def schedule_summary(topology: Topology, report: VerificationReport, seconds: float,
                     collective: Collective = Collective.ALLGATHER, predicted_tau: Fraction | None = None) -> dict:
    """expr, nodes, degree, diameter, steps, tau, bw_optimal, verified, seconds, and the bounds.

    `steps` and `tau` are measured from the schedule by the model checker; for an allreduce they cover both
    phases (the optimum is then 2(N-1)/N). `degree` is the nominal d (links carry B/d); `bw_optimal` and
    `moore_optimal` are the paper's Definitions 10 and 11 against every N-node degree-d topology (the Moore
    bound holds for any digraph of largest out-degree d; an irregular topology is never BW-optimal), and
    `tau_lower_bound` is Theorem 4's bound for this topology (larger than (N-1)/N when it is irregular or has
    self-loops)."""
    phases = 2 if collective is Collective.ALLREDUCE else 1
    tau = report.tau
    out = {
        "expr": topology.expr,
        "collective": collective.value,
        "nodes": topology.nodes,
        "degree": topology.degree,
        "diameter": topology.diameter,
        "steps": report.steps,
        "tau": float(tau),
        "tau_exact": str(tau),
        "bw_optimal": report.ok and tau == phases * optimal_tau(topology.nodes),
        "moore_optimal": report.ok and is_moore_optimal(topology.nodes, topology.degree, report.steps // phases),
        "moore_steps": moore_steps(topology.nodes, topology.degree) * phases,
        "optimal_tau": float(phases * optimal_tau(topology.nodes)),
        "regular": topology.regular,
        "tau_lower_bound": float(phases * tau_lower_bound(topology.nodes, topology.degree, topology.min_in_links)),
        "verified": report.ok,
        "transfers": report.transfers,
        "bidirectional": topology.bidirectional,
        "vertex_transitive": topology.vertex_transitive,
        "seconds": round(seconds, 6),
    }
    if predicted_tau is not None:
        out["predicted_tau_exact"] = str(phases * predicted_tau)
        out["prediction_matches"] = report.ok and phases * predicted_tau == tau
    if report.violation is not None:
        out["violation"] = report.violation.as_dict()
    return out
