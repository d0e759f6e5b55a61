"""SQLAlchemy models (DESIGN section 6). Large data (schedules, graphs, XML) lives in content-addressed
compressed blobs in `artifacts`, never as one row per transfer."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text,
                        UniqueConstraint)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    pass


class Plan(Base):
    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(String(200), index=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    request: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    stage: Mapped[str] = mapped_column(String(32), default="queued")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    reason: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[dict | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    owner: Mapped[str | None] = mapped_column(String(64), index=True)      # the key that queued it (jobs.owner_name)
    holder: Mapped[str | None] = mapped_column(String(64))        # the worker running its task (Worker.id)
    losses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")   # workers lost while holding it

    events: Mapped[list["PlanEvent"]] = relationship(back_populates="plan", order_by="PlanEvent.id",
                                                     cascade="all, delete-orphan")
    artifacts: Mapped[list["PlanArtifact"]] = relationship(back_populates="plan", cascade="all, delete-orphan")
    binding: Mapped["PlanBinding | None"] = relationship(viewonly=True, uselist=False)
    revisions: Mapped[list["PlanRevision"]] = relationship(viewonly=True, order_by="PlanRevision.number",
                                                           lazy="selectin")


class PlanEvent(Base):
    __tablename__ = "plan_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    status: Mapped[str] = mapped_column(String(16))
    stage: Mapped[str] = mapped_column(String(32))
    progress: Mapped[float] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)
    # a stage's start event carries started_at; the event that closes it all three (services.store.stage_events)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    duration_s: Mapped[float | None] = mapped_column(Float)

    plan: Mapped[Plan] = relationship(back_populates="events")


class Frontier(Base):
    """Cached Pareto frontier per (N, d, options) - independent of alpha, M, B (paper 5.4)."""

    __tablename__ = "frontiers"
    __table_args__ = (UniqueConstraint("nodes", "degree", "options", name="uq_frontier_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    nodes: Mapped[int] = mapped_column(Integer)
    degree: Mapped[int] = mapped_column(Integer)
    options: Mapped[str] = mapped_column(String(100))
    entries: Mapped[list] = mapped_column(JSON)
    seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Artifact(Base):
    """A content-addressed compressed blob (sha256 of the stored bytes)."""

    __tablename__ = "artifacts"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    media_type: Mapped[str] = mapped_column(String(100))
    size: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PlanArtifact(Base):
    """A plan's named artifacts (e.g. schedule:allreduce, topology) pointing at blobs."""

    __tablename__ = "plan_artifacts"

    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    digest: Mapped[str] = mapped_column(ForeignKey("artifacts.digest"))
    meta: Mapped[dict | None] = mapped_column(JSON)

    plan: Mapped[Plan] = relationship(back_populates="artifacts")


class Evaluation(Base):
    """One topology evaluation (POST /v1/topologies/evaluate), run by a worker. The id is the sha256 of the
    canonical request, so a repeated request is the same evaluation (its result or its failure)."""

    __tablename__ = "evaluations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    request: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    stage: Mapped[str] = mapped_column(String(32), default="queued")
    reason: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    owner: Mapped[str | None] = mapped_column(String(64), index=True)      # the key that queued it (jobs.owner_name)
    holder: Mapped[str | None] = mapped_column(String(64))        # the worker running its task (Worker.id)
    losses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")   # workers lost while holding it


class ApiKey(Base):
    """API keys, stored as sha256 hashes; role scheduler | agent | viewer (agents bound to one panel)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    panel_id: Mapped[str | None] = mapped_column(String(100))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class FabricRow(Base):
    """A registered fabric: hosts, their ports and how each fiber is cabled to which panel port
    (services.fabric.Fabric.to_dict())."""

    __tablename__ = "fabrics"

    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    spec: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PanelRow(Base):
    """A patch panel or OCS; ids are global because panel agents address /v1/panels/{panel}."""

    __tablename__ = "panels"

    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    fabric_id: Mapped[str] = mapped_column(ForeignKey("fabrics.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    ports: Mapped[int] = mapped_column(Integer)


class HostReservation(Base):
    """A host held by an active plan; the primary key makes "no two active plans share a host" a database
    guarantee, even with concurrent workers."""

    __tablename__ = "host_reservations"

    fabric_id: Mapped[str] = mapped_column(ForeignKey("fabrics.id", ondelete="CASCADE"), primary_key=True)
    host_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)


class PlanBinding(Base):
    """A plan bound to a fabric: node -> host map, port assignment, and the panel versions it needs."""

    __tablename__ = "plan_bindings"

    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True)
    fabric_id: Mapped[str] = mapped_column(ForeignKey("fabrics.id", ondelete="CASCADE"), index=True)
    assignment: Mapped[dict] = mapped_column(JSON)
    required_versions: Mapped[dict] = mapped_column(JSON)      # panel id -> config version with its connections
    fabric_ready: Mapped[bool] = mapped_column(Boolean, default=False)
    released: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PanelConfig(Base):
    """A version of a panel's full cross-connect list (every active plan's connections on that panel)."""

    __tablename__ = "panel_configs"

    panel_id: Mapped[str] = mapped_column(ForeignKey("panels.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    connections: Mapped[list] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PanelState(Base):
    """What the panel's agent last reported: the version its report names (`reported_version`) and the report's
    `sequence` when the agent numbers its reports, whether it applied it, the last version it applied with
    exactly that version's connections, and its connections."""

    __tablename__ = "panel_states"

    panel_id: Mapped[str] = mapped_column(ForeignKey("panels.id", ondelete="CASCADE"), primary_key=True)
    applied_version: Mapped[int] = mapped_column(Integer, default=0)
    reported_version: Mapped[int] = mapped_column(Integer, default=0)
    report_sequence: Mapped[int | None] = mapped_column(BigInteger)   # the agent's counter (optional)
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text)
    connections: Mapped[list | None] = mapped_column(JSON)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CompileJob(Base):
    """A schedule compiled for one runtime with one set of options (CompileOptions.key()): queued, running,
    done (the XML is the artifact `digest`) or failed (nothing fits: `reason`); failures are kept as results.
    A job the API records on demand is an outbox job like plans and evaluations (services.store.jobs: attempts,
    heartbeats, dispatch); the id is the sha256 of (plan, collective, options), `spec` the options as fields."""

    __tablename__ = "compile_jobs"
    __table_args__ = (UniqueConstraint("plan_id", "collective", "options", name="uq_compile_job"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    collective: Mapped[str] = mapped_column(String(32))
    options: Mapped[str] = mapped_column(String(300))
    spec: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    stage: Mapped[str] = mapped_column(String(32), default="queued")
    digest: Mapped[str | None] = mapped_column(ForeignKey("artifacts.digest"))
    meta: Mapped[dict | None] = mapped_column(JSON)
    reason: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    owner: Mapped[str | None] = mapped_column(String(64), index=True)      # the key that queued it (jobs.owner_name)
    holder: Mapped[str | None] = mapped_column(String(64))        # the worker running its task (Worker.id)
    losses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")   # workers lost while holding it


class PlanRevision(Base):
    """A revision of a done plan (DESIGN 4.9): its topology, schedules and artifacts after failed links
    (`kind` failure, built by a worker like a plan: outbox, attempts, heartbeats) or back on the full topology
    once a repair is applied (`kind` restored). Revision 0 is the plan itself; `failed` lists every link
    failed in this revision ([tail, head, lane] of the plan's topology)."""

    __tablename__ = "plan_revisions"
    __table_args__ = (UniqueConstraint("plan_id", "number", name="uq_plan_revision_number"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    stage: Mapped[str] = mapped_column(String(32), default="queued")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    reason: Mapped[str | None] = mapped_column(Text)
    cause: Mapped[dict] = mapped_column(JSON)
    failed: Mapped[list] = mapped_column(JSON)
    repair: Mapped[bool] = mapped_column(Boolean, default=False)
    result: Mapped[dict | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    owner: Mapped[str | None] = mapped_column(String(64), index=True)      # the key that queued it (jobs.owner_name)
    holder: Mapped[str | None] = mapped_column(String(64))        # the worker running its task (Worker.id)
    losses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")   # workers lost while holding it


class Repair(Base):
    """A re-patch around failed ports ordered by a failure revision: the moved arcs and the panel config
    versions carrying them. `pending` until every panel of the plan has applied its version; then `applied`
    and the plan gets a `restored` revision (`restored_number`)."""

    __tablename__ = "repairs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    revision_number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), index=True)
    panels: Mapped[dict] = mapped_column(JSON)
    moves: Mapped[list] = mapped_column(JSON)
    ready_estimate_s: Mapped[float] = mapped_column(Float)
    restored_number: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class PortFault(Base):
    """A panel port known to be faulty (reported by its agent, or behind a link the scheduler reported):
    `side` ingress (where a tx fiber lands) or egress (where an rx fiber lands)."""

    __tablename__ = "port_faults"

    panel_id: Mapped[str] = mapped_column(ForeignKey("panels.id", ondelete="CASCADE"), primary_key=True)
    side: Mapped[str] = mapped_column(String(8), primary_key=True)
    port: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(16))
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class HostPlane(Base):
    """The 1x2 switches of a host on a fabric with look-ahead planes (TopoOpt App. C): which side is active
    (the job running) and which plan holds the other side, the look-ahead plane. No row: side 0 active, no
    look-ahead plan."""

    __tablename__ = "host_planes"

    fabric_id: Mapped[str] = mapped_column(ForeignKey("fabrics.id", ondelete="CASCADE"), primary_key=True)
    host_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    active_side: Mapped[int] = mapped_column(Integer, default=0)
    lookahead_plan_id: Mapped[str | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"), index=True)


class Worker(Base):
    """A worker process (services.store.jobs.worker_id) and its heartbeat: a job is lost only when the worker
    that holds it stopped beating, never while its next task waits in the queue."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))                  # celery | embedded
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class Change(Base):
    """A change committed on SQLite (services.store.notify): the other API processes of an embedded deployment
    read the feed and drop their caches and wake their waiters (on PostgreSQL, NOTIFY does this)."""

    __tablename__ = "changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(32))
    key: Mapped[str] = mapped_column(String(200))
    origin: Mapped[str] = mapped_column(String(64))               # the process that committed it
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
