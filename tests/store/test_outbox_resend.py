"""The outbox's resend (services.store.jobs): a job handed to the broker that no worker started within the
resend delay (its message lost) is sent again with a new attempt, and the first message, should it still
arrive, cannot write. On SQLite and PostgreSQL."""
from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from services.store import jobs, repo
from services.store.db import migrate, session_scope
from services.store.models import Plan, utcnow

from tests.conftest import BACKENDS, MINIMAL, database_url, unique_job


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    u = database_url(request.param, tmp_path, "resend", migrated=True)
    migrate(u)
    return u


def _queued_plan(url: str) -> str:
    with session_scope(url) as s:
        plan, _ = repo.create_plan(s, {**MINIMAL, "job_id": unique_job()}, None)
        return plan.id


def _sent(url: str, plan_id: str, ago_s: float) -> int:
    with session_scope(url) as s:
        attempt = jobs.begin_dispatch(s, "plan", plan_id)
        jobs.mark_dispatched(s, "plan", plan_id, attempt)
        s.execute(update(Plan).where(Plan.id == plan_id).values(dispatched_at=utcnow() - timedelta(seconds=ago_s)))
        return attempt


def test_a_sent_job_no_worker_started_is_sent_again_after_the_delay(url):
    pid = _queued_plan(url)
    first = _sent(url, pid, ago_s=5)
    with session_scope(url) as s:
        assert ("plan", pid) not in jobs.undispatched(s)                        # sent: not in the outbox
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=60)     # not lost yet
        assert jobs.begin_dispatch(s, "plan", pid, resend_after_s=60) is None
    with session_scope(url) as s:
        s.execute(update(Plan).where(Plan.id == pid).values(dispatched_at=utcnow() - timedelta(seconds=61)))
    with session_scope(url) as s:
        assert ("plan", pid) in jobs.undispatched(s, resend_after_s=60)
        again = jobs.begin_dispatch(s, "plan", pid, resend_after_s=60)
        assert again == first + 1
        jobs.mark_dispatched(s, "plan", pid, again)
    with session_scope(url) as s:
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=60)     # sent again just now
        assert not jobs.claim(s, "plan", pid, first)                            # the lost message cannot write
        assert jobs.claim(s, "plan", pid, again)


def test_a_started_or_finished_job_is_never_resent(url):
    pid = _queued_plan(url)
    attempt = _sent(url, pid, ago_s=3600)
    with session_scope(url) as s:                       # a task takes its job when it starts
        assert jobs.take(s, "plan", pid, attempt, "w1")
        assert repo.advance(s, pid, stage="frontier", progress=0.1, attempt=attempt) is not False
    with session_scope(url) as s:
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=60)
        assert jobs.begin_dispatch(s, "plan", pid, resend_after_s=60) is None
        assert repo.fail(s, pid, "test", attempt=attempt)
    with session_scope(url) as s:
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=0.001)


def test_a_failed_resend_leaves_the_job_in_the_outbox(url):
    pid = _queued_plan(url)
    first = _sent(url, pid, ago_s=120)
    with session_scope(url) as s:
        again = jobs.begin_dispatch(s, "plan", pid, resend_after_s=60)
        jobs.undo_dispatch(s, "plan", pid, again)                               # the broker refused it
    with session_scope(url) as s:
        assert ("plan", pid) in jobs.undispatched(s)                            # waits for the next sweep
        assert jobs.begin_dispatch(s, "plan", pid) == first + 1


def test_resends_back_off(url):
    pid = _queued_plan(url)
    _sent(url, pid, ago_s=61)
    with session_scope(url) as s:
        again = jobs.begin_dispatch(s, "plan", pid, resend_after_s=60)          # attempt 2
        jobs.mark_dispatched(s, "plan", pid, again)
        s.execute(update(Plan).where(Plan.id == pid).values(dispatched_at=utcnow() - timedelta(seconds=90)))
    with session_scope(url) as s:
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=60)     # the second waits 120 s
        s.execute(update(Plan).where(Plan.id == pid).values(dispatched_at=utcnow() - timedelta(seconds=121)))
    with session_scope(url) as s:
        assert ("plan", pid) in jobs.undispatched(s, resend_after_s=60)
