"""The panel protocol as a state machine (hypothesis RuleBasedStateMachine), on SQLite and PostgreSQL, through
the store functions the API calls (services.store.fabrics): config versions issued (plans bound, released,
re-patched), reports applied, failed and degraded, repaired, sent two at once from threads, and replayed.

The model keeps every panel's newest accepted report. A report is accepted exactly when it is newer
(fabrics.newer: a higher version, or the same version with a higher sequence; without sequences, arrival
order); two reports sent at once are accepted as if they had come in one of the two orders. Invariant: each
bound plan is fabric_ready exactly when every panel it needs last reported applied or degraded for its
required version or a later one, and each panel's stored state is its newest report's."""
from __future__ import annotations

import itertools
import threading

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from services.fabric import planes_fabric
from services.fabric.assign import Assignment
from services.store import fabrics, repo
from services.store.db import migrate, session_scope
from services.store.models import PanelState, PlanBinding
from services.synthesis.topology.catalog import build

from tests.conftest import BACKENDS, HANG_S, MINIMAL, database_url

STATUSES = ("applied", "failed", "degraded")
COUNTER = itertools.count()


def _report(url: str, panel: str, version: int, status: str, seq: int | None) -> bool:
    """One report through the store (as PUT /v1/panels/{panel}/state does); False when refused as not newer."""
    with session_scope(url) as s:
        try:
            fabrics.report_state(s, panel, version, status, None, None, seq)
        except fabrics.StaleReport:
            s.rollback()
            return False
        return True


def _accepts(last: tuple | None, version: int, seq: int | None) -> bool:
    if last is None or version > last[0]:
        return True
    return version == last[0] and not (seq is not None and last[1] is not None and seq <= last[1])


def _after(last: tuple | None, version: int, seq: int | None, status: str) -> tuple:
    keep = last[1] if last is not None and seq is None and version == last[0] else seq
    return version, keep, status


def machine(url: str):
    class PanelProtocol(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            n = next(COUNTER)
            self.fabric = f"sm{n}"
            self.panels = [f"sm{n}-p0", f"sm{n}-p1"]
            fab = planes_fabric(8, 2, fabric_id=self.fabric, panel_prefix=f"sm{n}-p")
            with session_scope(url) as s:
                fabrics.register(s, fab)
            self.plans: dict[str, list[str]] = {}      # plan id -> its hosts
            self.last: dict[str, tuple] = {}           # panel -> newest accepted (version, sequence, status)
            self.sent: list[tuple] = []                # every report sent (for replays)
            self.seq = 0
            for hosts in (["h0", "h1", "h2", "h3"], ["h4", "h5", "h6", "h7"]):
                self._bind(hosts)

        def _bind(self, hosts):
            with session_scope(url) as s:
                plan, _ = repo.create_plan(s, {**MINIMAL, "job_id": f"sm-{next(COUNTER)}"}, None)
                fabrics.bind_plan(s, plan.id, self.fabric, build("ring(4)"), hosts)
                self.plans[plan.id] = hosts

        def _latest(self, panel: str) -> int:
            with session_scope(url) as s:
                return fabrics.latest_config(s, panel).version

        # ----- configs issued -----------------------------------------------------------------------
        @rule(which=st.integers(0, 1))
        def release_and_bind_again(self, which):
            """A job ends and another takes its hosts: two new config versions on the panels."""
            pid = sorted(self.plans, key=lambda p: self.plans[p])[which]
            hosts = self.plans.pop(pid)
            with session_scope(url) as s:
                fabrics.release_plan(s, pid)
            self._bind(hosts)

        @rule(which=st.integers(0, 1))
        def repatch(self, which):
            """A re-patch (services.fabric.repair) with the same ports: the plan needs the panels' latest
            versions and is not fabric_ready until they are applied again."""
            pid = sorted(self.plans)[which]
            with session_scope(url) as s:
                b = s.get(PlanBinding, pid)
                fabrics.replace_assignment(s, pid, Assignment.from_dict(b.assignment), "test re-patch")

        # ----- reports ------------------------------------------------------------------------------
        def _send(self, panel, back, status, sequenced):
            version = max(1, self._latest(panel) - back)
            seq = None
            if sequenced:
                self.seq += 1
                seq = self.seq
            return panel, version, status, seq

        @rule(p=st.integers(0, 1), back=st.integers(0, 2), status=st.sampled_from(STATUSES), sequenced=st.booleans())
        def report(self, p, back, status, sequenced):
            panel, version, status, seq = r = self._send(self.panels[p], back, status, sequenced)
            self.sent.append(r)
            accepted = _report(url, panel, version, status, seq)
            assert accepted == _accepts(self.last.get(panel), version, seq), (r, self.last.get(panel))
            if accepted:
                self.last[panel] = _after(self.last.get(panel), version, seq, status)

        @precondition(lambda self: self.sent)
        @rule(k=st.integers(0, 1000))
        def replay(self, k):
            """A report sent again (a retry, or an old message arriving late)."""
            panel, version, status, seq = r = self.sent[k % len(self.sent)]
            accepted = _report(url, panel, version, status, seq)
            assert accepted == _accepts(self.last.get(panel), version, seq), (r, self.last.get(panel))
            if accepted:
                self.last[panel] = _after(self.last.get(panel), version, seq, status)

        @rule(p=st.integers(0, 1), q=st.integers(0, 1), backs=st.tuples(st.integers(0, 1), st.integers(0, 1)),
              statuses=st.tuples(st.sampled_from(STATUSES), st.sampled_from(STATUSES)), sequenced=st.booleans())
        def two_at_once(self, p, q, backs, statuses, sequenced):
            """Two reports from two threads at once: the outcome is one of the two serial orders."""
            a = self._send(self.panels[p], backs[0], statuses[0], sequenced)
            b = self._send(self.panels[q], backs[1], statuses[1], sequenced)
            barrier, got = threading.Barrier(2), {}

            def send(r):
                barrier.wait()
                got[r] = _report(url, *r)
            threads = [threading.Thread(target=send, args=(r,)) for r in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(HANG_S)
            self.sent += [a, b]
            with session_scope(url) as s:
                stored = {x: s.get(PanelState, x) for x in self.panels}
                stored = {x: (v.reported_version, v.report_sequence, v.status) for x, v in stored.items() if v}
            outcomes = []
            for order in ((a, b), (b, a)):
                last, acc = dict(self.last), {}
                for panel, version, status, seq in order:
                    acc[(panel, version, status, seq)] = _accepts(last.get(panel), version, seq)
                    if acc[(panel, version, status, seq)]:
                        last[panel] = _after(last.get(panel), version, seq, status)
                outcomes.append((last, acc))
            match = [last for last, acc in outcomes if acc == got and last == stored]
            assert match, (a, b, got, stored, self.last)
            self.last = match[0]

        # ----- the invariant ----------------------------------------------------------------------------
        @invariant()
        def ready_exactly_when_every_newest_report_applied_the_required_version(self):
            with session_scope(url) as s:
                for pid in self.plans:
                    b = s.get(PlanBinding, pid)
                    want = all(self.last.get(p) is not None and self.last[p][2] in fabrics.APPLIED
                               and self.last[p][0] >= v for p, v in b.required_versions.items())
                    assert b.fabric_ready == want, (pid, b.required_versions, self.last)
                for panel in self.panels:
                    row = s.get(PanelState, panel)
                    got = None if row is None else (row.reported_version, row.report_sequence, row.status)
                    assert got == self.last.get(panel)

    return PanelProtocol


@pytest.mark.parametrize("backend", BACKENDS)
def test_panel_protocol(backend, tmp_path):
    url = database_url(backend, tmp_path, "protocol", migrated=True)
    migrate(url)
    run_state_machine_as_test(machine(url), settings=settings(
        max_examples=10, stateful_step_count=12, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
