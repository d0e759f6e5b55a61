"""Service settings from the environment (FABRICPLAN_*), shared by the gateway, workers and CLI.

Embedded default: no variables set -> a SQLite file under FABRICPLAN_DATA_DIR and an in-process worker.
Scaled deployment: FABRICPLAN_DATABASE_URL=postgresql+psycopg://... and FABRICPLAN_BROKER_URL=redis://...
"""
from __future__ import annotations

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
    task_time_limit_s: int = 1800
    task_max_retries: int = 3
    stale_plan_s: int = Field(default=900, description="a running plan without progress this long has lost its worker")
    bfb_fanout_min_nodes: int = Field(default=256, description="BFB solves at least this large fan out as a group")
    bfb_fanout_blocks: int = 8
    compile_time_limit_s: int = Field(default=120, description="fit search budget of one XML compile")
    api_keys_required: bool = False
    cors_origins: list[str] = []

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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
