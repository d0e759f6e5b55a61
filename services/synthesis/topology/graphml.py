"""GraphML of a topology (http://graphml.graphdrawing.org/specification.html), valid against graphml.xsd.

`topology_graphml(doc)` writes the topology artifact's JSON form (expr, nodes, degree, bidirectional,
arcs [tail, head, lane] and, for regular topologies, `permutation`: the Konig-split permutation of each
arc) as one directed graph. The specification's rules this follows (graphml-structure.xsd):
- every `key` has an `id` unique in the document, a `for` domain and an `attr.type`;
- `graph` declares `edgedefault`; node ids are NMTOKENs unique in the document (`n0`, `n1`, ...);
- edge ids are optional in the schema but unique when given: arc i is `e{i}` (parallel arcs are distinct
  edges told apart by `lane`), and `source` / `target` name declared nodes.
Keys: graph `expr`, `degree`, `bidirectional`; edge `lane` and `permutation` (absent from irregular
topologies, whose arcs do not split into d permutations). tests/synthesis/topology/test_graphml.py validates the output
against tests/schemas/graphml.xsd (written from the specification; see its header).
"""
from __future__ import annotations

import io
from xml.etree import ElementTree as ET

__all__ = ["GRAPHML_NS", "topology_graphml"]

GRAPHML_NS = "http://graphml.graphdrawing.org/xmlns"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"
_LOCATION = f"{GRAPHML_NS} http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd"

# (id, domain, attr.name, attr.type)
_GRAPH_KEYS = (("g_expr", "graph", "expr", "string"), ("g_degree", "graph", "degree", "int"),
               ("g_bidirectional", "graph", "bidirectional", "boolean"))
_EDGE_KEYS = (("e_lane", "edge", "lane", "int"), ("e_permutation", "edge", "permutation", "int"))


def topology_graphml(doc: dict) -> bytes:
    """The GraphML document (UTF-8 bytes) of a topology artifact `doc` (services.jobs.stages.artifacts.topology_json)."""
    ET.register_namespace("", GRAPHML_NS)
    ET.register_namespace("xsi", _XSI)
    q = lambda tag: f"{{{GRAPHML_NS}}}{tag}"           # noqa: E731
    root = ET.Element(q("graphml"), {f"{{{_XSI}}}schemaLocation": _LOCATION})
    perm = doc.get("permutation")
    keys = _GRAPH_KEYS + (_EDGE_KEYS if perm is not None else _EDGE_KEYS[:1])
    for kid, domain, name, typ in keys:
        ET.SubElement(root, q("key"), {"id": kid, "for": domain, "attr.name": name, "attr.type": typ})
    graph = ET.SubElement(root, q("graph"), {"id": "G", "edgedefault": "directed"})
    for kid, value in (("g_expr", str(doc["expr"])), ("g_degree", str(int(doc["degree"]))),
                       ("g_bidirectional", "true" if doc["bidirectional"] else "false")):
        ET.SubElement(graph, q("data"), {"key": kid}).text = value
    for v in range(int(doc["nodes"])):
        ET.SubElement(graph, q("node"), {"id": f"n{v}"})
    for i, (a, b, lane) in enumerate(doc["arcs"]):
        edge = ET.SubElement(graph, q("edge"), {"id": f"e{i}", "source": f"n{a}", "target": f"n{b}"})
        ET.SubElement(edge, q("data"), {"key": "e_lane"}).text = str(int(lane))
        if perm is not None:
            ET.SubElement(edge, q("data"), {"key": "e_permutation"}).text = str(int(perm[i]))
    buf = io.BytesIO()
    ET.ElementTree(root).write(buf, encoding="utf-8", xml_declaration=True)
    return buf.getvalue()
