"""A training plan's topology by TopoOpt's co-optimisation (`topology: {"strategy": "topoopt"}`; Wang et al.,
NSDI'23, section 4, Algorithm 1, App. E and I; services.synthesis.evaluate.topoopt).

After the finder's selection (training.stage_select: every frontier entry simulated, the fastest known), the
select stage runs TopologyFinder for each parallelisation strategy TopoOpt weighs for the model (its
model-parallel layers kept model-parallel, or made data-parallel), prices each on TopoOpt's own model (AllReduce
on its rings, MP traffic host-forwarded over all shortest paths: `TopoOptDesign.costs`), and serves the
topology built for the request's own parallelisation (its model-parallel layers stay model-parallel: the
plan's all-to-all schedule and iteration are that model's). The served topology is priced like any frontier
entry (`search.candidates.candidate`: the schedules `construct` ships, which the schedules stage builds and
model-checks against this price) and the job's iteration simulated on it (`evaluate_training`, the same
simulator as the frontier's entries). It becomes the plan's selected topology and the training block's `best`
(an entry of kind `topoopt`); the plan's `topology_strategy` block says which strategy was used, the
iteration on the served schedules, TopoOpt's own price, every strategy's, and the finder's best beside them.
"""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.evaluate.iteration import CollectiveCost, best_bucket
from services.synthesis.evaluate.topoopt import strategies_for, topology_finder
from services.synthesis.evaluate.training import evaluate_training
from services.synthesis.evaluate.training_job import ModelSpec
from services.synthesis.search.candidates import candidate
from services.synthesis.search.finder import frontier_entry

from services.jobs.requests.plan_spec import PlanSpec

__all__ = ["select_topoopt"]


def select_topoopt(state: dict, plan_id: str, spec: PlanSpec, model: ModelSpec, training: dict, advance) -> dict:
    """The state with TopoOpt's topology selected (module docstring); `training` is the finder's training block."""
    n, d, link = spec.nodes, spec.degree, spec.link
    designs = []
    for st in strategies_for(model, n):
        advance(plan_id, "select", 0.3, f"TopoOpt TopologyFinder for {model.name} ({st.name})")
        design = topology_finder(n, d, float(st.model.gradient_bytes), st.mp_demand)
        designs.append((st, design, best_bucket(st.model, design.costs(st.name), link).iteration_s))
    st, design, own_s = designs[0]                       # the request's parallelisation: model-parallel
    expr = design.topology.expr
    advance(plan_id, "select", 0.32, f"pricing TopoOpt's topology ({design.allreduce_degree} rings, "
                                     f"{len(design.mp_links) // n} MP matchings)")
    entry = frontier_entry(candidate(expr, "topoopt"))
    ar = entry["costs"]["allreduce"]
    ev = evaluate_training(model, n, d, link, topologies=[design.topology], baselines=(),
                           alltoall=spec.training.alltoall_cost,
                           allreduce=lambda _e: CollectiveCost(ar["steps"], Fraction(ar["tau_exact"])))
    ours = ev.entries[0].to_dict()
    ours["kind"] = "topoopt"
    ours["name"] = "topoopt"
    selected = {**entry, "workload_time_us": ours["iteration_s"] * 1e6}
    if ours["alltoall"].get("throughput") is not None:
        selected["alltoall_f"] = ours["alltoall"]["throughput"]
    block = {
        "strategy": "topoopt",
        "parallelisation": st.name,
        "expr": expr,
        "allreduce_rings": design.allreduce_degree,
        "generators": list(design.generators),
        "mp_matchings": len(design.mp_links) // n,
        "bandwidth_tax": design.bandwidth_tax,
        "longest_route": design.longest_route,
        "iteration_s": ours["iteration_s"],
        "topoopt_model_iteration_s": own_s,
        "strategies": [{"name": s.name, "allreduce_rings": g.allreduce_degree, "mp_matchings": len(g.mp_links) // n,
                        "topoopt_model_iteration_s": t} for s, g, t in designs],
        "finder_best": training["best"],
        "finder_best_iteration_s": training["best_iteration_s"],
    }
    training = {**training, "entries": [*training["entries"], ours], "best": expr,
                "best_iteration_s": ours["iteration_s"]}
    advance(plan_id, "select", 0.33, f"selected TopoOpt's topology: iteration {ours['iteration_s'] * 1e3:.3f} ms "
                                     f"(the finder's best {block['finder_best']}: "
                                     f"{block['finder_best_iteration_s'] * 1e3:.3f} ms)")
    return {**state, "selected": selected, "training": training, "topology_strategy": block}
