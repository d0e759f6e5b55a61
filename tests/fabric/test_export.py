"""Fabric export in the schedulers' formats: Slurm topology.yaml (topology/block plugin, topology.yaml(5)) and
Kubernetes node labels with a Kueue Topology (services.fabric.export)."""
from __future__ import annotations

import re

import pytest
import yaml

from services.fabric.export import (ExportError, RunningJob, blocks_of, k8s_labels, label_value,
                                    reconfigurable_groups, slurm_topology_yaml)
from services.fabric.model import Fabric, planes_fabric, shared_panel_fabric

from tests.conftest import MINIMAL, unique_job, wait_done

# Kubernetes: a label key is an optional DNS-subdomain prefix and '/', then a name of at most 63 characters;
# a value is empty or at most 63 characters of alphanumerics with -, _ and . inside (apimachinery validation)
KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _valid_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (not prefix or (len(prefix) <= 253 and DNS_SUBDOMAIN.match(prefix))) and len(name) <= 63 \
        and bool(KEY_NAME.match(name))


def _check_slurm_schema(doc) -> None:
    """topology.yaml(5): a list of topologies, `topology` first, exactly one type; a block topology has
    block_sizes (each successive size a power-of-two multiple of the one before) and blocks of {block, nodes}."""
    assert isinstance(doc, list) and doc
    for topo in doc:
        assert list(topo)[0] == "topology" and isinstance(topo["topology"], str)
        assert set(topo) <= {"topology", "cluster_default", "block", "flat", "tree"}
        assert sum(k in topo for k in ("block", "flat", "tree")) == 1
        block = topo["block"]
        assert set(block) == {"block_sizes", "blocks"}
        sizes = block["block_sizes"]
        assert all(isinstance(s, int) and s > 0 for s in sizes)
        for a, b in zip(sizes, sizes[1:]):
            assert b > a and (b // a) & (b // a - 1) == 0 and b % a == 0
        names = [b["block"] for b in block["blocks"]]
        assert len(set(names)) == len(names)
        for b in block["blocks"]:
            assert set(b) == {"block", "nodes"} and isinstance(b["nodes"], str)
            assert len(b["nodes"].split(",")) >= sizes[0]


def test_groups_follow_the_panels_port_by_port():
    fab = planes_fabric(8, 3)
    assert reconfigurable_groups(fab) == [tuple(h.id for h in fab.hosts)]
    shared = shared_panel_fabric(4, 2)
    assert len(reconfigurable_groups(shared)) == 1
    # two hosts cabled to other panels form a group of their own
    doc = fab.to_dict()
    doc["panels"].append({"id": "extra", "kind": "ocs", "ports": 8})
    for i, h in enumerate(doc["hosts"][6:]):
        h["ports"][0] = {"tx": {"panel": "extra", "port": i}, "rx": {"panel": "extra", "port": i}}
    mixed = Fabric.from_dict(doc)
    groups = reconfigurable_groups(mixed)
    assert [len(g) for g in groups] == [6, 2] and groups[1] == ("h6", "h7")


def test_blocks_slurm_yaml_and_labels():
    fab = planes_fabric(12, 2, fabric_id="F_1")
    jobs = [RunningJob("p2", ("h08", "h09", "h10", "h11")), RunningJob("p1", ("h00", "h01", "h02", "h03"))]
    blocks = blocks_of(fab, jobs)
    assert [(b.name, len(b.hosts)) for b in blocks] == [("job-p1", 4), ("job-p2", 4), ("free-g0", 4)]
    doc = yaml.safe_load(slurm_topology_yaml(fab, blocks))
    _check_slurm_schema(doc)
    assert doc[0]["topology"] == "fabricplan-F_1" and doc[0]["block"]["block_sizes"] == [4]
    assert doc[0]["block"]["blocks"][2] == {"block": "free-g0", "nodes": "h04,h05,h06,h07"}
    out = k8s_labels(fab, blocks)
    assert set(out["labels"]) == {h.id for h in fab.hosts}
    for host, labels in out["labels"].items():
        for k, v in labels.items():
            assert _valid_key(k), k
            assert len(v) <= 63 and VALUE.match(v), v
    assert out["labels"]["h00"]["fabricplan.io/plan"] == "p1"
    assert "fabricplan.io/plan" not in out["labels"]["h05"]
    assert DNS_SUBDOMAIN.match(out["topology"]["metadata"]["name"])
    assert out["topology"]["spec"]["levels"][-1] == {"nodeLabel": "kubernetes.io/hostname"}


def test_label_values_are_valid_and_distinct():
    raws = ["a" * 80, "a" * 81, "x/y", "x y", "-lead", "ok.value_1", "", "__"]
    vals = [label_value(r) for r in raws]
    assert all(len(v) <= 63 and VALUE.match(v) for v in vals)
    assert len(set(vals)) == len(vals)
    assert label_value("ok.value_1") == "ok.value_1"


def test_host_ids_slurm_cannot_name_are_refused():
    fab = planes_fabric(["a,b", "c"], 1)
    with pytest.raises(ExportError, match="Slurm node name"):
        slurm_topology_yaml(fab, blocks_of(fab, []))
    with pytest.raises(ExportError, match="not in fabric"):
        blocks_of(fab, [RunningJob("p", ("zz",))])


def test_export_route(client):
    fabric = {"id": "fx", "layout": "planes", "hosts": 24, "ports_per_host": 4, "panel_prefix": "fx-plane"}
    assert client.post("/v1/fabrics", json=fabric).status_code == 201
    body = {**MINIMAL, "job_id": unique_job(), "fabric_id": "fx"}
    plan = wait_done(client, client.post("/v1/plans", json=body).json()["id"])
    assert plan["status"] == "done", plan.get("reason")
    hosts = plan["fabric"]["hosts"]
    r = client.get("/v1/fabrics/fx/export", params={"format": "slurm"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/yaml")
    doc = yaml.safe_load(r.text)
    _check_slurm_schema(doc)
    blocks = {b["block"]: b["nodes"].split(",") for b in doc[0]["block"]["blocks"]}
    assert sorted(blocks[f"job-{plan['id']}"]) == sorted(hosts)
    assert len(blocks["free-g0"]) == 24 - len(hosts)
    r = client.get("/v1/fabrics/fx/export", params={"format": "k8s-labels"})
    assert r.status_code == 200
    labels = r.json()["labels"]
    assert {h for h, v in labels.items() if v.get("fabricplan.io/plan") == plan["id"]} == set(hosts)
    assert client.get("/v1/fabrics/nope/export", params={"format": "slurm"}).status_code == 404
    bad = client.get("/v1/fabrics/fx/export", params={"format": "pbs"})
    assert bad.status_code == 422
    assert client.get("/v1/fabrics/fx/export").status_code == 422
