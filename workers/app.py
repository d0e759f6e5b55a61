"""Celery app factory. `celery -A workers.app worker` or `fabricplan worker` starts a worker.

Reliability: acks_late, prefetch 1, a soft time limit (an exception in the task: its job fails with that
reason) and a hard one `grace` later, a memory limit per process (workers.limits, worker_process_init) and
children replaced once they hold more, bounded retries in the tasks (a pool process that dies is retried,
then its job fails), and a visibility timeout just above the time limit. A whole worker that dies is found
by the jobs' heartbeats (services.store.jobs.lost). Embedded mode (no broker URL): the same tasks run eagerly
in job processes of the gateway (workers.embedded).
"""
from __future__ import annotations

from celery import Celery

from services.config import Settings, get_settings

from .limits import grace_s


def create_celery(settings: Settings | None = None) -> Celery:
    s = settings or get_settings()
    app = Celery("fabricplan", include=["workers.tasks"])
    configure(app, s)
    return app


def configure(app: Celery, s: Settings) -> None:
    if app.conf.broker_url != (s.broker_url or "memory://"):
        _drop_connections(app)
    app.conf.update(
        broker_url=s.broker_url or "memory://",
        result_backend=s.backend_url or "cache+memory://",
        task_always_eager=s.embedded,
        task_eager_propagates=True,
        task_acks_late=True,
        task_reject_on_worker_lost=False,          # a lost pool process is retried (bounded) by the task
        worker_prefetch_multiplier=1,
        task_soft_time_limit=s.task_time_limit_s,
        task_time_limit=s.task_time_limit_s + grace_s(s.task_time_limit_s),
        worker_max_memory_per_child=s.task_memory_limit_mb * 1024,
        broker_connection_timeout=2,
        broker_transport_options={"visibility_timeout": s.task_time_limit_s + 60, "socket_connect_timeout": 2,
                                  **({"global_keyprefix": s.redis_key_prefix} if s.redis_key_prefix else {})},
        result_backend_transport_options={"global_keyprefix": s.redis_key_prefix} if s.redis_key_prefix else {},
        result_expires=24 * 3600,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
    )


def _drop_connections(app: Celery) -> None:
    """Pooled broker connections and producers belong to the previous broker URL."""
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    if "amqp" in app.__dict__:
        app.amqp._producer_pool = None


celery_app = create_celery()
app = celery_app
