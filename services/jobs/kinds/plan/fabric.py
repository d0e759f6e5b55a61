"""The plan's fabric stage (DESIGN 4.8): when the request names a fabric, the selected topology's hosts are
reserved, its arcs assigned to ports and panels, and new panel configs published (services.store.fabrics).
"""
from __future__ import annotations

from sqlalchemy.exc import IntegrityError

from services.fabric import FabricError
from services.synthesis.topology.catalog import build

from services.config import get_settings
from services.store import fabrics
from services.store.db import session_scope
from services.jobs.stages.attempts import PlanInputError, advance, claim, plan_spec

__all__ = ["stage_fabric"]


def stage_fabric(state: dict, plan_id: str) -> dict:
    """When the request names a fabric: reserve its hosts, assign ports, publish new panel configs."""
    if state.get("stop"):
        return state
    spec = plan_spec(plan_id)
    if not spec.fabric_id:
        return state
    advance(plan_id, "fabric", 0.35, f"reserving hosts on {spec.fabric_id}")
    topo = build(state["selected"]["expr"])
    try:
        with session_scope(get_settings().sqlalchemy_url) as s:
            claim(s, plan_id)
            b = fabrics.bind_plan(s, plan_id, spec.fabric_id, topo, spec.hosts, spec.lookahead)
            summary = {"fabric_id": b.fabric_id, "hosts": b.assignment["hosts"], "panels": b.required_versions,
                       **fabrics.binding_facts(s, b, spec.bandwidth_gbps / topo.degree)}
    except IntegrityError:
        raise PlanInputError("another plan reserved one of these hosts at the same time; submit again") from None
    except FabricError as exc:
        raise PlanInputError(str(exc)) from None
    return {**state, "fabric": summary}
