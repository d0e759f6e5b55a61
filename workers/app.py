"""Celery app factory. `celery -A workers.app worker` or `fabricplan worker` starts a worker.

Reliability: acks_late + reject_on_worker_lost (a task whose worker dies is redelivered), prefetch 1,
hard and soft time limits, bounded retries in the tasks, and a visibility timeout just above the time limit.
Embedded mode (no broker URL): the same tasks run eagerly in the gateway's in-process worker thread.
"""
from __future__ import annotations

from celery import Celery

from services.config import Settings, get_settings


def create_celery(settings: Settings | None = None) -> Celery:
    s = settings or get_settings()
    app = Celery("fabricplan", include=["workers.tasks"])
    configure(app, s)
    return app


def configure(app: Celery, s: Settings) -> None:
    app.conf.update(
        broker_url=s.broker_url or "memory://",
        result_backend=s.backend_url or "cache+memory://",
        task_always_eager=s.embedded,
        task_eager_propagates=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=s.task_time_limit_s,
        task_soft_time_limit=max(30, s.task_time_limit_s - 30),
        broker_transport_options={"visibility_timeout": s.task_time_limit_s + 60},
        result_expires=24 * 3600,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
    )


celery_app = create_celery()
app = celery_app
