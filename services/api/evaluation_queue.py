"""What the routes that queue worker evaluations share (topology evaluations and cluster simulations): one
queued row per canonical request, admitted against its owner's worker budget, read back as a dict."""
from __future__ import annotations

from services.jobs.requests import evaluation_request
from services.store.db import session_scope
from services.store.models import Evaluation

from . import budget

__all__ = ["load", "queue"]


def queue(settings, evaluation_id: str, request: dict, principal) -> tuple[dict, bool]:
    """The evaluation of this canonical request: the stored one, or a new queued one admitted against the
    principal's budget (429 past it). (evaluation as a dict, created)"""
    with session_scope(settings.sqlalchemy_url) as s:
        ev, created = evaluation_request.submit(s, evaluation_id, request)
        if created:
            budget.admit(s, ev, principal, settings)
        return evaluation_request.as_dict(ev), created


def load(url: str, evaluation_id: str) -> dict | None:
    """The evaluation as a dict, or None when there is none of that id."""
    with session_scope(url) as s:
        ev = s.get(Evaluation, evaluation_id)
        return None if ev is None else evaluation_request.as_dict(ev)
