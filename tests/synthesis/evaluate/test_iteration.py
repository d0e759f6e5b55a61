"""Training-iteration simulator (hand-computed iterations), model descriptions and the model catalog."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from services.synthesis.evaluate.alltoall import moore_throughput_bound
from services.synthesis.evaluate.iteration import (
    CollectiveCost,
    TopologyCosts,
    best_bucket,
    iteration_lower_bound,
    simulate_iteration,
    topology_lower_bound,
)
from services.synthesis.evaluate.devices import gpu_profile
from services.synthesis.evaluate.model_catalog import CATALOG, catalog_model
from services.synthesis.evaluate.training_job import DEVICES, ModelSpecError, parse_model_spec
from services.synthesis.schedule.cost import LinkModel, moore_steps

# an allreduce of S bytes takes 0.5 + S / 100 seconds; an all-to-all of D bytes on 4 nodes of degree 2 with
# f = 1/2 takes (D / 4) / (0.5 * 100 / 2) = D / 100 seconds
LINK = LinkModel(alpha_s=0.5, node_bandwidth_Bps=100.0)
COSTS = TopologyCosts("t", 4, 2, CollectiveCost(1, Fraction(1)), alltoall_throughput=0.5)


def model(*layers, buckets=(100,)):
    return parse_model_spec({"name": "m", "buckets_bytes": list(buckets), "layers": [
        {"name": f"l{i}", "params_bytes": p, "forward_s": f, "backward_s": b, **({"moe_tokens_bytes": m} if m else {})}
        for i, (p, f, b, m) in enumerate(layers)]})


THREE = model((40, 1.0, 2.0, None), (40, 1.0, 2.0, None), (40, 1.0, 2.0, None), buckets=(30, 50, 100, 10 ** 6))


# ----- hand-computed iterations ---------------------------------------------------------------------------------

def test_buckets_filling():
    # forward ends at 3; backward ends l2 at 5, l1 at 7, l0 at 9 (40 bytes each)
    r = simulate_iteration(THREE, COSTS, LINK, 100)          # one bucket of 120 bytes at 9: 0.5 + 1.2
    assert (r.iteration_s, r.allreduces, r.allreduce_s) == pytest.approx((10.7, 1, 1.7))
    assert r.compute_s == 9.0 and r.exposed_allreduce_s == pytest.approx(1.7) and r.alltoall_s == 0
    r = simulate_iteration(THREE, COSTS, LINK, 30)           # every layer fills one: 40 bytes at 5, 7, 9
    assert (r.iteration_s, r.allreduces, r.allreduce_s) == pytest.approx((9.9, 3, 2.7))
    assert r.exposed_allreduce_s == pytest.approx(0.9)


def test_last_partial_bucket():
    # capacity 50: l2 + l1 = 80 bytes fill a bucket at 7 (done at 8.3); l0's 40 bytes are the last, partial one
    r = simulate_iteration(THREE, COSTS, LINK, 50)
    assert (r.iteration_s, r.allreduces, r.allreduce_s) == pytest.approx((9.9, 2, 1.3 + 0.9))
    r = simulate_iteration(THREE, COSTS, LINK, 10 ** 6)      # never full: only the last bucket, at 9
    assert (r.iteration_s, r.allreduces) == pytest.approx((10.7, 1))


def test_best_bucket_takes_the_smaller_on_ties():
    r = best_bucket(THREE, COSTS, LINK)
    assert r.iteration_s == pytest.approx(9.9) and r.bucket_bytes == 30


def test_alltoall_waits_for_an_in_flight_allreduce():
    # MoE layer m (400 bytes to the experts: 4 s per all-to-all) then dense x (100 gradient bytes)
    # forward: a2a 0-4, m 4-5, a2a 5-9, x 9-10; backward: x 10-11, its full bucket's allreduce 11-12.5;
    # m's first a2a is issued at 11 but starts at 12.5 (FIFO), ends 16.5; m 16.5-17.5; a2a 17.5-21.5
    m = model((0, 1.0, 1.0, 400), (100, 1.0, 1.0, None))
    r = simulate_iteration(m, COSTS, LINK, 100)
    assert r.iteration_s == pytest.approx(21.5)
    assert (r.compute_s, r.alltoall_s, r.alltoalls, r.allreduces) == pytest.approx((4.0, 16.0, 4, 1))
    assert r.exposed_allreduce_s == pytest.approx(1.5)        # compute waited behind the allreduce


def test_alltoall_from_a_schedule():
    # a verified all-to-all schedule's (steps, tau) replaces the MCF time: 2 * 0.5 + 0.25 * 400 / 100 = 2 s
    costs = TopologyCosts("t", 4, 2, CollectiveCost(1, Fraction(1)), 0.5, CollectiveCost(2, Fraction(1, 4)))
    r = simulate_iteration(model((0, 1.0, 1.0, 400)), costs, LINK, 100)
    assert r.alltoall_s == pytest.approx(8.0) and r.iteration_s == pytest.approx(10.0)
    with pytest.raises(ValueError, match="throughput"):
        simulate_iteration(model((0, 1.0, 1.0, 400)), TopologyCosts("t", 4, 2, COSTS.allreduce), LINK, 100)


def test_bucket_capacity_must_be_positive():
    with pytest.raises(ValueError):
        simulate_iteration(THREE, COSTS, LINK, 0)


layer = st.tuples(st.integers(0, 500), st.floats(0, 3), st.floats(0, 3), st.one_of(st.none(), st.integers(1, 900)))


@settings(max_examples=60, deadline=None)
@given(layers=st.lists(layer, min_size=1, max_size=12), bucket=st.integers(1, 2000),
       nodes=st.integers(2, 40), degree=st.integers(1, 4))
def test_iteration_is_bounded(layers, bucket, nodes, degree):
    # at the optimal costs (Moore steps, tau* for RS + AG, f* for the all-to-all) the iteration still meets
    # the lower bound, and it never exceeds compute plus every collective run back to back
    m = model(*layers)
    link = LinkModel(alpha_s=0.01, node_bandwidth_Bps=100.0)
    opt = TopologyCosts("opt", nodes, degree, CollectiveCost(2 * moore_steps(nodes, degree),
                                                              Fraction(2 * (nodes - 1), nodes)),
                        moore_throughput_bound(nodes, degree))
    r = simulate_iteration(m, opt, link, bucket)
    lb = iteration_lower_bound(m, nodes, degree, link)
    assert r.iteration_s >= lb * (1 - 1e-12) - 1e-12
    assert topology_lower_bound(m, opt, link) == pytest.approx(lb, rel=1e-12, abs=1e-12)   # optimal costs
    r = simulate_iteration(m, COSTS, LINK, bucket)
    assert r.iteration_s >= topology_lower_bound(m, COSTS, LINK) * (1 - 1e-12) - 1e-12
    assert r.iteration_s <= r.compute_s + r.alltoall_s + r.allreduce_s + 1e-9
    assert r.exposed_allreduce_s >= 0 and r.iteration_s >= r.compute_s + r.alltoall_s - 1e-9


# ----- model descriptions -----------------------------------------------------------------------------------

def test_file_form_and_devices():
    spec = parse_model_spec('{"name": "m", "device": "h100", "buckets_bytes": [10, 5, 10], "layers": ['
                            '{"name": "a", "params_bytes": 4, "forward_flops": 989e12, "backward_s": 2.5}]}')
    fwd, bwd = spec.compute_times()
    assert fwd[0] == pytest.approx(989e12 / DEVICES["h100"].peak_flops / DEVICES["h100"].efficiency) and bwd[0] == 2.5
    assert DEVICES["h100"].peak_flops == gpu_profile("h100").peak("bf16")          # one table for both models
    assert spec.buckets_bytes == [5, 10]
    custom = parse_model_spec({"name": "m", "device": {"name": "x", "peak_flops": 1e12, "efficiency": 0.5},
                               "layers": [{"name": "a", "params_bytes": 0, "forward_flops": 1e12,
                                           "backward_flops": 2e12}]})
    assert custom.compute_times()[1][0] == pytest.approx(4.0)


@pytest.mark.parametrize("body, where", [
    ('{"name": "m", "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1}]}', "layers.0"),
    ('{"name": "m", "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1, "forward_flops": 1, '
     '"backward_s": 1}]}', "layers.0"),
    ('{"name": "m", "layers": [{"name": "a", "params_bytes": -1, "forward_s": 1, "backward_s": 1}]}',
     "layers.0.params_bytes"),
    ('{"name": "m", "layers": [{"name": "a", "params_bytes": 1, "forward_flops": 1, "backward_s": 1}]}', ""),
    ('{"name": "m", "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1, "backward_s": 1, "x": 2}]}',
     "layers.0.x"),
    ('{"name": "m", "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1, "backward_s": 1, '
     '"moe_tokens_bytes": 0}]}', "layers.0.moe_tokens_bytes"),
    ('{"name": "m", "device": "tpu", "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1, '
     '"backward_s": 1}]}', "device"),
    ('{"name": "m", "buckets_bytes": [0], "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1, '
     '"backward_s": 1}]}', "buckets_bytes"),
    ('{"name": "m", "layers": []}', "layers"),
    ('[1, 2]', ""),
    ('{"name": ', ""),
])
def test_bad_model_descriptions_name_the_field(body, where):
    with pytest.raises(ModelSpecError) as err:
        parse_model_spec(body)
    assert err.value.errors and err.value.errors[0][0] == where


# ----- the catalog --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CATALOG))
def test_catalog_parameter_totals_match_published_counts(name):
    m = CATALOG[name]
    assert abs(m.parameters() - m.published_parameters) <= 0.01 * m.published_parameters


def test_exactly_published_shapes():
    for name in ("resnet50", "vgg16", "gpt2-small", "gpt2-medium", "gpt2-large"):
        assert CATALOG[name].parameters() == CATALOG[name].published_parameters


def test_catalog_instances():
    c = catalog_model("switch-c-2048", 1024)
    moe = [l for l in c.layers if l.is_moe]
    assert len(moe) == 30                                              # every FFN of 15 + 15 blocks
    assert moe[0].moe_tokens_bytes == 2 * 512 * 2080 * 2              # 2 sequences per node, bf16
    assert c.gradient_bytes == 2 * sum(r.params for r in CATALOG["switch-c-2048"].rows())  # experts excluded
    assert catalog_model("resnet50", 8).layers[0].forward_flops == pytest.approx(64 * 2 * 49 * 3 * 64 * 112 ** 2)
    assert catalog_model("gpt2-small", 4, batch=2).name.startswith("gpt2-small (2 per node)")
    for bad in (dict(name="nosuch", nodes=4), dict(name="switch-base-128", nodes=256, expert_parallel=256),
                dict(name="switch-base-128", nodes=256, expert_parallel=48),
                dict(name="switch-base-128", nodes=96, expert_parallel=48),
                dict(name="vgg16", nodes=4, expert_parallel=2),
                dict(name="gpt3-175b", nodes=2048), dict(name="vgg16", nodes=4, device="tpu"),
                dict(name="vgg16", nodes=0), dict(name="vgg16", nodes=4, batch=0)):
        with pytest.raises(ValueError):
            catalog_model(**bad)


def test_expert_data_parallelism_by_hand():
    # one MoE layer on N = 4 nodes in expert-parallel groups of 2: the groups replicate the experts
    layer = {"name": "moe", "params_bytes": 0, "forward_s": 1.0, "backward_s": 2.0, "moe_tokens_bytes": 300,
             "expert_params_bytes": 400}
    link = LinkModel(alpha_s=0.5, node_bandwidth_Bps=100.0)
    costs = TopologyCosts("t", 4, 2, CollectiveCost(1, Fraction(1)), alltoall_throughput=0.5)
    alone = parse_model_spec({"name": "all", "layers": [layer]})
    r = simulate_iteration(alone, costs, link, 100)
    # all 4 nodes: each all-to-all (300/4) / (0.5 * 100/2) = 3 s, 4 of them; expert gradients never allreduced
    assert (r.iteration_s, r.alltoall_s, r.allreduces) == (pytest.approx(15.0), pytest.approx(12.0), 0)
    grouped = parse_model_spec({"name": "groups", "layers": [layer], "expert_parallel": 2})
    r = simulate_iteration(grouped, costs, link, 100)
    # groups of 2: the bytes for the other nodes, 1/2 of 300 instead of 3/4, at the same rate: 3 * (1/2)/(3/4)
    assert r.alltoall_s == pytest.approx(4 * 2.0)
    # each node's 400 / 2 expert bytes allreduced over the 2 replicas: 1 step, tau 1 scaled by (1/2)/(3/4)
    assert r.allreduces == 1 and r.allreduce_s == pytest.approx(0.5 + 200 * (2 / 3) / 100)
    assert r.iteration_s == pytest.approx(3.0 + 8.0 + r.allreduce_s)      # after the last all-to-all
    # the bounds see the groups too, and never exceed the simulated iteration
    assert topology_lower_bound(grouped, costs, link) <= r.iteration_s
    assert iteration_lower_bound(grouped, 4, 2, link) <= topology_lower_bound(grouped, costs, link)
    for bad in (3, 8):
        with pytest.raises(ValueError, match="must divide the 4 nodes"):
            simulate_iteration(grouped.model_copy(update={"expert_parallel": bad}), costs, link, 100)


def test_more_nodes_than_experts_run_expert_data_parallel():
    # switch-base-128 on 256 nodes was refused ("expert parallelism over all nodes allows at most 128 nodes"):
    # now two groups of 128 nodes, each expert on 2 of them
    spec = catalog_model("switch-base-128", 256)
    assert spec.expert_parallel == 128 and spec.expert_group(256) == 128
    assert catalog_model("switch-base-128", 200).expert_parallel == 8          # gcd(200, 128)
    assert catalog_model("switch-base-128", 64).expert_parallel is None        # all 64 nodes
    assert catalog_model("switch-base-128", 256, expert_parallel=64).expert_parallel == 64
    moe = [l for l in spec.layers if l.is_moe]
    costs = TopologyCosts("t", 256, 4, CollectiveCost(8, Fraction(255, 128)), alltoall_throughput=0.004)
    link = LinkModel.from_units(10, 100)
    r = simulate_iteration(spec, costs, link, 1 << 20)
    assert r.alltoalls == 4 * len(moe)
    assert r.alltoall_s == pytest.approx(4 * sum(costs.alltoall_s(link, l.moe_tokens_bytes, 128) for l in moe))
    one = costs.alltoall_s(link, moe[0].moe_tokens_bytes, 128)
    assert one == pytest.approx(costs.alltoall_s(link, moe[0].moe_tokens_bytes) * (127 / 128) / (255 / 256))
