"""GraphML of a topology (http://graphml.graphdrawing.org/specification.html), valid against graphml.xsd.

`topology_graphml(doc)` writes the topology artifact's JSON form (expr, nodes, degree, bidirectional,
arcs [tail, head, lane] and, for regular topologies, `permutation`: the Konig-split permutation of each
arc) as one directed graph. The specification's rules this follows (graphml-structure.xsd):
- every `key` has an `id` unique in the document, a `for` domain and an `attr.type`;
- `graph` declares `edgedefault`; node ids are NMTOKENs unique in the document (`n0`, `n1`, ...);
- edge ids are optional in the schema but unique when given: arc i is `e{i}` (parallel arcs are distinct
  edges told apart by `lane`), and `source` / `target` name declared nodes.
Keys: graph `expr`, `degree`, `bidirectional`; node `rank` (the node's index: the rank its host takes in the
compiled XML); edge `lane` and `permutation` (absent from irregular topologies, whose arcs do not split into d
permutations). tests/synthesis/topology/test_graphml.py validates the output
against tests/schemas/graphml.xsd (written from the specification; see its header).
"""
from __future__ import annotations

import io
from xml.etree import ElementTree as ET

__all__ = ["GRAPHML_NS", "topology_graphml", "topology_node_link"]

GRAPHML_NS = "http://graphml.graphdrawing.org/xmlns"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"
_LOCATION = f"{GRAPHML_NS} http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd"

# (id, domain, attr.name, attr.type)
_GRAPH_KEYS = (("g_expr", "graph", "expr", "string"), ("g_degree", "graph", "degree", "int"),
               ("g_bidirectional", "graph", "bidirectional", "boolean"))
_NODE_KEYS = (("n_rank", "node", "rank", "int"),)
_EDGE_KEYS = (("e_lane", "edge", "lane", "int"), ("e_permutation", "edge", "permutation", "int"))


def topology_graphml(doc: dict) -> bytes:
    """The GraphML document (UTF-8 bytes) of a topology artifact `doc` (services.jobs.stages.artifacts.topology_json)."""
    ET.register_namespace("", GRAPHML_NS)
    ET.register_namespace("xsi", _XSI)
    q = lambda tag: f"{{{GRAPHML_NS}}}{tag}"           # noqa: E731
    root = ET.Element(q("graphml"), {f"{{{_XSI}}}schemaLocation": _LOCATION})
    perm = doc.get("permutation")
    keys = _GRAPH_KEYS + _NODE_KEYS + (_EDGE_KEYS if perm is not None else _EDGE_KEYS[:1])
    for kid, domain, name, typ in keys:
        ET.SubElement(root, q("key"), {"id": kid, "for": domain, "attr.name": name, "attr.type": typ})
    graph = ET.SubElement(root, q("graph"), {"id": "G", "edgedefault": "directed"})
    for kid, value in (("g_expr", str(doc["expr"])), ("g_degree", str(int(doc["degree"]))),
                       ("g_bidirectional", "true" if doc["bidirectional"] else "false")):
        ET.SubElement(graph, q("data"), {"key": kid}).text = value
    for v in range(int(doc["nodes"])):
        node = ET.SubElement(graph, q("node"), {"id": f"n{v}"})
        ET.SubElement(node, q("data"), {"key": "n_rank"}).text = str(v)
    for i, (a, b, lane) in enumerate(doc["arcs"]):
        edge = ET.SubElement(graph, q("edge"), {"id": f"e{i}", "source": f"n{a}", "target": f"n{b}"})
        ET.SubElement(edge, q("data"), {"key": "e_lane"}).text = str(int(lane))
        if perm is not None:
            ET.SubElement(edge, q("data"), {"key": "e_permutation"}).text = str(int(perm[i]))
    buf = io.BytesIO()
    ET.ElementTree(root).write(buf, encoding="utf-8", xml_declaration=True)
    return buf.getvalue()


def topology_node_link(doc: dict) -> dict:
    """The topology artifact `doc` as networkx node-link data (`networkx.node_link_data` of a MultiDiGraph:
    `nx.node_link_graph(data)` reads it back): graph attributes expr, degree, bidirectional; node ids are the
    ranks (with a `rank` attribute); one edge per arc, keyed by its lane, with `permutation` when regular.

    >>> import networkx as nx
    >>> data = topology_node_link({"expr": "ring(3)", "nodes": 3, "degree": 1, "bidirectional": False,
    ...                            "arcs": [[0, 1, 0], [1, 2, 0], [2, 0, 0]], "permutation": [0, 0, 0]})
    >>> g = nx.node_link_graph(data)
    >>> sorted(g.edges(keys=True)), g.graph["expr"], g.nodes[2]["rank"]
    ([(0, 1, 0), (1, 2, 0), (2, 0, 0)], 'ring(3)', 2)
    """
    import networkx as nx

    g = nx.MultiDiGraph(expr=str(doc["expr"]), degree=int(doc["degree"]), bidirectional=bool(doc["bidirectional"]))
    g.add_nodes_from((v, {"rank": v}) for v in range(int(doc["nodes"])))
    perm = doc.get("permutation")
    for i, (a, b, lane) in enumerate(doc["arcs"]):
        attrs = {"permutation": int(perm[i])} if perm is not None else {}
        g.add_edge(int(a), int(b), key=int(lane), **attrs)
    return nx.node_link_data(g)
