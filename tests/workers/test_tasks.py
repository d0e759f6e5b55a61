"""workers.tasks: a job task's retries of a transient fault come from the deployment's settings."""
from __future__ import annotations

import pytest
from celery.exceptions import MaxRetriesExceededError, Retry

from services.config import get_settings
from workers import tasks


@pytest.mark.parametrize("retries", [0, 5])
def test_transient_retries_follow_the_setting(monkeypatch, retries):
    monkeypatch.setenv("FABRICPLAN_TASK_MAX_RETRIES", str(retries))
    get_settings.cache_clear()
    task = tasks.plan_frontier
    monkeypatch.setattr(task, "apply_async", lambda *a, **k: None)        # a retry would send the task again
    try:
        assert task.max_retries == retries
        # Celery's own decision (Task.retry): below the limit a retry is scheduled, at the limit the task gives up
        for done, outcome in [(retries - 1, Retry), (retries, MaxRetriesExceededError)]:
            if done < 0:
                continue
            task.push_request(retries=done, called_directly=False, is_eager=False)
            try:
                with pytest.raises(outcome):
                    task.retry(exc=None, countdown=0, throw=True)
            finally:
                task.pop_request()
    finally:
        get_settings.cache_clear()
