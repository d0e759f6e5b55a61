"""GraphML of topologies: valid against graphml.xsd (tests/schemas/graphml.xsd, written from the GraphML
specification: see its header), unique edge ids, and keys for lane, permutation and bidirectional."""
from __future__ import annotations

import functools
import io
from pathlib import Path

import networkx as nx
import pytest
import xmlschema

from services.jobs.stages.artifacts import topology_graphml, topology_json
from services.synthesis.topology.catalog import build
from services.synthesis.topology.graphml import topology_node_link


@functools.cache
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(Path(__file__).resolve().parents[2] / "schemas" / "graphml.xsd"))


@pytest.mark.parametrize("expr", ["ring(5)", "torus(4, 4)", "genkautz(3, 10)", "line(circulant(8), 2)",
                                  "remove(genkautz(4, 64), 0>63)", "complete(4)"])
def test_topology_graphml_is_valid_and_complete(expr):
    t = build(expr)
    doc = topology_json(t)
    data = topology_graphml(t)
    schema().validate(data.decode())                # raises XMLSchemaValidationError with the reason
    g = nx.read_graphml(io.BytesIO(data), force_multigraph=True)
    assert {k: g.graph[k] for k in ("expr", "degree", "bidirectional")} == \
        {"expr": t.expr, "degree": t.degree, "bidirectional": t.bidirectional}
    assert g.number_of_nodes() == t.nodes and g.number_of_edges() == t.arcs
    assert {int(v[1:]): d["rank"] for v, d in g.nodes(data=True)} == {v: v for v in range(t.nodes)}
    edges = sorted((int(a[1:]), int(b[1:]), int(k[1:]), d) for a, b, k, d in g.edges(keys=True, data=True))
    assert len({k for _, _, k, _ in edges}) == t.arcs          # unique edge ids e0 .. e{arcs-1}
    for (a, b, i, d), (ta, tb, lane) in zip(sorted(edges, key=lambda e: e[2]), doc["arcs"]):
        assert (a, b, d["lane"]) == (ta, tb, lane)
        if t.regular:
            assert d["permutation"] == doc["permutation"][i]
        else:
            assert "permutation" not in d


def test_the_schema_rejects_what_graphml_forbids():
    """The vendored schema is not a formality: duplicate edge ids, edges to undeclared nodes, data of an
    undeclared key and a graph without edgedefault are each refused."""
    good = topology_graphml(build("ring(3)")).decode()
    assert schema().is_valid(good)
    bad = [good.replace('id="e1"', 'id="e0"'),
           good.replace('target="n2"', 'target="n9"'),
           good.replace('<data key="e_lane">0</data>', '<data key="nokey">0</data>', 1),
           good.replace(' edgedefault="directed"', ""),
           good.replace('<node id="n2">', '<node id="n1" /><node id="n2">')]
    for doc in bad:
        assert doc != good and not schema().is_valid(doc)


def test_served_graphml_validates(client):
    from tests.conftest import MINIMAL, unique_job, wait_done

    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    assert wait_done(client, pid)["status"] == "done"
    r = client.get(f"/v1/plans/{pid}/topology", params={"format": "graphml"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/graphml+xml")
    schema().validate(r.text)
    n = client.get(f"/v1/plans/{pid}/topology", params={"format": "node-link"})
    assert n.status_code == 200 and n.headers["etag"].endswith('-node-link"')
    g = nx.node_link_graph(n.json())
    doc = client.get(f"/v1/plans/{pid}/topology").json()
    assert sorted(g.edges(keys=True)) == sorted((a, b, lane) for a, b, lane in doc["arcs"])
    assert client.get(f"/v1/plans/{pid}/topology", params={"format": "node-link"},
                      headers={"If-None-Match": n.headers["etag"]}).status_code == 304


@pytest.mark.parametrize("expr", ["ring(5)", "torus(4, 4)", "remove(genkautz(4, 64), 0>63)", "complete(4)"])
def test_node_link_reads_back_in_networkx(expr):
    t = build(expr)
    doc = topology_json(t)
    g = nx.node_link_graph(topology_node_link(doc))
    assert g.is_directed() and g.is_multigraph()
    assert g.number_of_nodes() == t.nodes and g.number_of_edges() == t.arcs
    assert sorted(g.edges(keys=True)) == sorted((a, b, lane) for a, b, lane in doc["arcs"])
    assert all(d["rank"] == v for v, d in g.nodes(data=True)) and g.graph["expr"] == t.expr
