"""Service settings from the environment (FABRICPLAN_*), shared by the gateway, workers and CLI.

Embedded default: no variables set -> a SQLite file under FABRICPLAN_DATA_DIR and an in-process worker.
Scaled deployment: FABRICPLAN_DATABASE_URL=postgresql+psycopg://... and FABRICPLAN_BROKER_URL=redis://...
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FABRICPLAN_", extra="ignore")

    data_dir: Path = Field(default=Path(".fabricplan"), description="where the embedded SQLite file lives")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default: SQLite in data_dir")
    broker_url: str | None = Field(default=None, description="Celery broker; default: in-process worker")
    result_backend: str | None = Field(default=None, description="Celery result backend (chords); default: the broker")
    redis_key_prefix: str = Field(default="", max_length=100, description="prefix of every broker and result key "
                                  "in Redis, so that deployments (or test runs) can share one Redis database")
    task_time_limit_s: int = Field(default=1800, ge=1, description="wall time of one worker task; a task beyond "
                                   "it is stopped and its plan fails with that reason")
    task_memory_limit_mb: int = Field(default=4096, ge=16, description="address space a task may add to its "
                                      "worker process (RLIMIT_AS); beyond it the plan fails with that reason")
    task_max_retries: int = Field(default=3, ge=0, description="retries of a worker task after a transient fault "
                                  "(database or broker unavailable), with exponential back-off up to 60 s")
    heartbeat_s: float = Field(default=5.0, gt=0, description="a running task refreshes its job's heartbeat this "
                               "often (at least 4 times per stale_plan_s)")
    stale_plan_s: int = Field(default=30, ge=1, description="a running job without a heartbeat this long has lost "
                              "its worker: it is redelivered (or fails once max_attempts are used)")
    max_attempts: int = Field(default=3, ge=1, description="deliveries of one job before a lost worker fails it")
    worker_concurrency: int = Field(default=2, ge=1, description="embedded worker: jobs run at once, each in "
                                    "its own process")
    sweep_s: float = Field(default=2.0, gt=0, description="outbox dispatch and lost-worker sweep period")
    dispatch_resend_s: float = Field(default=60.0, gt=0, description="scaled: a job sent this long ago that no "
                                     "worker started is sent again (its message was lost)")
    bfb_fanout_min_nodes: int = Field(default=256, description="BFB solves at least this large fan out as a group")
    bfb_fanout_blocks: int = 8
    compile_time_limit_s: int = Field(default=120, description="fit search budget of one XML compile")
    compile_processes: int = Field(default=0, ge=0, description="a plan's (or revision's) compile stage runs "
                                   "this many compile processes at once (0: one per CPU core)")
    compile_memory_budget_mb: int = Field(default=0, ge=0, description="the compile processes of one stage "
                                          "together hold at most this estimated memory, and each is capped at "
                                          "it (0: FABRICPLAN_TASK_MEMORY_LIMIT_MB); a file estimated above it "
                                          "compiles alone")
    compile_unit_time_limit_s: float = Field(default=600.0, gt=0, description="a compile process still running "
                                             "this long is killed and its file fails with that reason")
    compile_simulate_max_steps: int = Field(
        default=25_000, ge=0, description="a compile job simulates candidate files up to this many XML steps (the "
        "CPU simulator is pure Python: about 6 s per 100,000 steps); larger files are held to the runtime's limits "
        "and tokenizer, use combined thread blocks only where the buffering bound allows them, and are proved "
        "deadlock-free by the cycle test of their waits (services.compiler.check.deadlock)")
    max_jobs_per_key: int = Field(default=32, ge=1, description="unfinished jobs (plans, evaluations, compiles, "
                                  "revisions: queued or running) one API key may have; a request that would queue "
                                  "one more answers 429 with Retry-After")
    viewer_max_jobs: int = Field(default=2, ge=0, description="the same bound for a viewer key (viewers queue "
                                 "evaluations and on-demand compiles only; 0: viewers read stored results only)")
    viewer_job_slots: int = Field(default=1, ge=1, description="viewer jobs the workers hold at once, all viewer "
                                  "keys together (the rest wait in the outbox), so schedulers' plans always find "
                                  "a free worker slot")
    api_keys_required: bool = False
    cors_origins: list[str] = []

    @property
    def compile_processes_resolved(self) -> int:
        return self.compile_processes or os.cpu_count() or 1

    @property
    def compile_memory_budget_bytes(self) -> int:
        return (self.compile_memory_budget_mb or self.task_memory_limit_mb) << 20

    @property
    def embedded(self) -> bool:
        return not self.broker_url

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'fabricplan.db').resolve()}"

    @property
    def backend_url(self) -> str | None:
        return self.result_backend or self.broker_url


_installed: Settings | None = None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return _installed if _installed is not None else Settings()


def install(settings: Settings) -> None:
    """Make `settings` what get_settings() returns in this process (a worker process started by the embedded
    service gets its parent's settings this way, not from its environment)."""
    global _installed
    _installed = settings
    get_settings.cache_clear()
