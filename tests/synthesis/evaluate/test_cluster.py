"""The shared-cluster simulator (TopoOpt section 5.6) against hand computations: max-min fair shares, two jobs
contending on one ToR uplink, two jobs on disjoint racks, the mix, and the direct fabric's isolation."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from services.synthesis.evaluate.cluster import (ClusterSpec, Reconfiguration, fat_tree_arity, jobs_from_mix,
                                                 max_min_rates, simulate_cluster, simulate_trace,
                                                 switched_iterations, _model)
from services.synthesis.evaluate.iteration import CollectiveCost, TopologyCosts, best_bucket
from services.synthesis.evaluate.model_catalog import catalog_model
from services.synthesis.evaluate.training_job import DeviceProfile
from services.synthesis.schedule.cost import LinkModel

# 16 servers: a k = 4 fat-tree, 2 servers per ToR; 2:1 leaves each ToR one uplink
SMALL = ClusterSpec(16, 4, 100.0, (("vgg16", 1.0),), servers_per_job=2, gpus_per_server=1)


def _isolated_iteration(spec: ClusterSpec, slowdown: float) -> float:
    """vgg16 on 2 servers whose ring flows run at host bandwidth / slowdown: tau = 2 (n-1)/n * slowdown."""
    model = catalog_model("vgg16", 2, batch=64, device=DeviceProfile(name="1xa100", peak_flops=312e12,
                                                                       efficiency=0.5))
    host = spec.degree * spec.port_Bps
    costs = TopologyCosts("t", 2, 1, CollectiveCost(2, Fraction(slowdown)))
    return best_bucket(model, costs, LinkModel(alpha_s=1e-6, node_bandwidth_Bps=host)).iteration_s


def test_two_jobs_contend_on_one_tor_uplink():
    host = SMALL.degree * SMALL.port_Bps
    # job A on servers 0 and 2, job B on 1 and 3: ToR 0 = {0, 1}, ToR 1 = {2, 3}, one uplink each (2:1)
    jobs = switched_iterations(SMALL, "fat-tree-2to1", ["vgg16", "vgg16"], [np.array([0, 2]), np.array([1, 3])],
                               host)
    for j in jobs:
        assert j.allreduce_slowdown == pytest.approx(2.0)        # 0->2 and 1->3 share ToR 0's one uplink
        assert j.iteration_s == pytest.approx(_isolated_iteration(SMALL, 2.0))
    assert jobs[0].iteration_s > _isolated_iteration(SMALL, 1.0)


def test_jobs_on_disjoint_racks_do_not_contend():
    host = SMALL.degree * SMALL.port_Bps
    for fabric in ("fat-tree", "fat-tree-2to1", "fat-tree-4to1", "rail-optimised"):
        jobs = switched_iterations(SMALL, fabric, ["vgg16", "vgg16"], [np.array([0, 1]), np.array([2, 3])], host)
        for j in jobs:
            assert j.allreduce_slowdown == pytest.approx(1.0), fabric
            assert j.iteration_s == pytest.approx(_isolated_iteration(SMALL, 1.0))


def test_sprayed_flows_share_every_uplink_and_hashed_ones_can_collide():
    host = SMALL.degree * SMALL.port_Bps
    within_pod = [np.array([0, 2]), np.array([1, 3])]        # ToR 0 = {0, 1} and ToR 1 = {2, 3}: both cross
    across_pods = [np.array([0, 4]), np.array([1, 5])]       # pod 0 to pod 1: ToR and core uplinks
    for placement in (within_pod, across_pods):
        for seed in range(4):
            spec = replace(SMALL, seed=seed, routing="spray")
            # full bisection: two flows leave a ToR of two uplinks, half of each flow on each: no contention
            for j in switched_iterations(spec, "fat-tree", ["vgg16", "vgg16"], placement, host):
                assert j.allreduce_slowdown == pytest.approx(1.0)
            # 2:1: one uplink left, both flows on it, sprayed or hashed
            for routing in ("spray", "ecmp"):
                for j in switched_iterations(replace(spec, routing=routing), "fat-tree-2to1", ["vgg16", "vgg16"],
                                             placement, host):
                    assert j.allreduce_slowdown == pytest.approx(2.0)
    # ECMP hashes each flow onto one uplink: some seeds put both on one (half rate), some on two
    hashed = {round(max(j.allreduce_slowdown for j in switched_iterations(
        replace(SMALL, seed=seed, routing="ecmp"), "fat-tree", ["vgg16", "vgg16"], within_pod, host)), 9)
        for seed in range(12)}
    assert hashed == {1.0, 2.0}


def test_precision_scales_the_compute_by_the_datasheet_peaks():
    spec = ClusterSpec(32, 4, 100.0, (("candle", 1.0),))
    times = {p: sum(map(np.sum, _model("candle", replace(spec, precision=p)).compute_times()))
             for p in ("bf16", "tf32", "fp32")}
    assert times["tf32"] == pytest.approx(2 * times["bf16"])                    # A100: 156 against 312 TFLOP/s
    assert times["fp32"] == pytest.approx(312 / 19.5 * times["bf16"])
    with pytest.raises(ValueError, match="precision"):
        replace(spec, precision="fp8")
    with pytest.raises(ValueError, match="routing"):
        replace(spec, routing="valiant")


def test_max_min_by_hand():
    # three flows on one link of 9, one of them also on a link of 1: 1, then 4 and 4
    rates = max_min_rates([np.array([0]), np.array([0, 1]), np.array([0])], np.array([9.0, 1.0]))
    assert rates.tolist() == pytest.approx([4.0, 1.0, 4.0])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True), min_size=1, max_size=12),
       st.lists(st.floats(0.5, 10.0), min_size=6, max_size=6), st.booleans(), st.randoms(use_true_random=False))
def test_max_min_is_feasible_and_every_flow_has_a_full_bottleneck(flows, caps, split, rnd):
    caps = np.asarray(caps)
    links = [np.asarray(f) for f in flows]
    # split: each flow puts a share in (0, 1] of its rate on each of its links (a sprayed flow)
    shares = [np.asarray([rnd.uniform(0.1, 1.0) for _ in f]) for f in flows] if split else None
    rates = max_min_rates(links, caps, shares)
    load = np.zeros(6)
    for i, (f, r) in enumerate(zip(links, rates)):
        load[f] += r * (shares[i] if split else 1.0)
    assert (load <= caps * (1 + 1e-9)).all()
    for f, r in zip(links, rates):
        # a bottleneck link: full, and no flow on it gets more than this one
        assert any(load[l] >= caps[l] * (1 - 1e-9) and all(rates[g] <= r * (1 + 1e-9)
                   for g, h in enumerate(links) if l in h) for l in f)


def test_mix_and_arity():
    mix = (("dlrm", 0.4), ("bert-large", 0.3), ("candle", 0.2), ("vgg16", 0.1))
    for count in (5, 10, 15, 20, 27):
        jobs = jobs_from_mix(mix, count)
        assert len(jobs) == count
        for name, w in mix:
            assert abs(jobs.count(name) - count * w) < 1
    assert fat_tree_arity(432) == 12 and 12 ** 3 // 4 == 432


def test_direct_jobs_are_isolated_and_pay_the_panels():
    spec = ClusterSpec(16, 4, 100.0, (("vgg16", 1.0),), servers_per_job=4, gpus_per_server=1, iterations=10,
                       reconfiguration=Reconfiguration(300.0, 48))
    one, four = simulate_cluster(spec, [1, 4], ["direct"])
    assert one.mean_iteration_s == pytest.approx(four.mean_iteration_s)     # no contention between shards
    assert four.reconfiguration_s == 4 * 300.0                              # 16 changes: one robot batch each
    assert four.mean_completion_s == pytest.approx(300.0 + 10 * four.mean_iteration_s)
    ahead = simulate_cluster(spec.__class__(**{**spec.__dict__, "reconfiguration": Reconfiguration(300.0, 48, True)}),
                             [4], ["direct"])[0]
    assert ahead.reconfiguration_s == 0.0


def test_bad_inputs_are_refused():
    for kw in ({"servers": 0}, {"degree": 0}, {"mix": (("nope", 1.0),)}, {"servers_per_job": 1},
               {"bandwidth_gbps": -1.0}, {"placement": "nearby"}):
        with pytest.raises(ValueError):
            ClusterSpec(**{**SMALL.__dict__, **kw})
    with pytest.raises(ValueError, match="do not fit"):
        simulate_cluster(SMALL, [9], ["direct"])
    with pytest.raises(ValueError, match="unknown fabric"):
        simulate_cluster(SMALL, [1], ["torus"])


def test_poisson_trace_by_hand():
    # 3 servers, jobs of 2: one job at a time; arrivals far faster than a job runs, so they queue FIFO
    spec = ClusterSpec(3, 2, 100.0, (("vgg16", 1.0),), servers_per_job=2, gpus_per_server=1, iterations=50,
                       reconfiguration=Reconfiguration(10.0, 48))
    t_iter = simulate_cluster(spec, [1], ["direct"])[0].mean_iteration_s
    r = simulate_trace(spec, "direct", 3.6e6, 3)                 # one arrival per ms on average
    one = 10.0 + 50 * t_iter                                      # panels, then the iterations
    assert r.mean_iteration_s == pytest.approx(t_iter)
    assert r.reconfiguration_s == 30.0
    assert 3 * one <= r.makespan_s <= 3 * one + 0.1               # back to back after the first arrival
    assert r.utilisation == pytest.approx(3 * 2 * one / (3 * r.makespan_s), rel=1e-6)   # held, panels included
    assert r.fragmentation_idle_host_s > 0                       # one server idle while the queue waits
    with pytest.raises(ValueError):
        simulate_trace(spec, "torus", 1.0, 3)
