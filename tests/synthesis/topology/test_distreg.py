"""Tests for services.synthesis.topology.distreg (Table 8 of the NSDI'25 paper
"Efficient Direct-Connect Topologies for Collective Communications")."""

from __future__ import annotations

import functools

import networkx as nx
import pytest

from services.synthesis.topology import distreg
from services.synthesis.topology.distreg import CATALOGUE, DistRegEntry, distreg_graph

# Table 8 (valency 4): name -> (N, diameter, intersection array {b; c}).
TABLE8 = {
    "octahedron": (6, 2, ([4, 1], [1, 4])),
    "paley9": (9, 2, ([4, 2], [1, 2])),
    "k55_minus_matching": (10, 3, ([4, 3, 1], [1, 3, 4])),
    "heawood_distance3": (14, 3, ([4, 3, 2], [1, 2, 4])),
    "petersen_line": (15, 3, ([4, 2, 1], [1, 1, 4])),
    "hypercube4": (16, 4, ([4, 3, 2, 1], [1, 2, 3, 4])),
    "heawood_line": (21, 3, ([4, 2, 2], [1, 1, 2])),
    "pg23_incidence": (26, 3, ([4, 3, 3], [1, 1, 4])),
    "ag24_minus_parallel_class": (32, 4, ([4, 3, 3, 1], [1, 1, 3, 4])),
    "odd4": (35, 3, ([4, 3, 3], [1, 1, 2])),
    "tutte8cage_line": (45, 4, ([4, 2, 2, 2], [1, 1, 1, 2])),
    "doubled_odd4": (70, 7, ([4, 3, 3, 2, 2, 1, 1], [1, 1, 2, 2, 3, 3, 4])),
    "gq33_incidence": (80, 4, ([4, 3, 3, 3], [1, 1, 1, 4])),
    "tutte12cage_line": (189, 6, ([4, 2, 2, 2, 2, 2], [1, 1, 1, 1, 1, 2])),
    "gh33_incidence": (728, 6, ([4, 3, 3, 3, 3, 3], [1, 1, 1, 1, 1, 4])),
}

NAMES = list(CATALOGUE)


@functools.lru_cache(maxsize=None)
def _graph(name: str) -> nx.Graph:
    return distreg_graph(name)


@functools.lru_cache(maxsize=None)
def _intersection_array(name: str):
    return nx.intersection_array(_graph(name))


def test_catalogue_matches_table8():
    assert list(CATALOGUE) == list(TABLE8)  # same entries, same order
    for key, entry in CATALOGUE.items():
        assert isinstance(entry, DistRegEntry)
        assert entry.name == key
        assert entry.name == entry.name.lower()
        assert entry.title
        assert entry.degree == 4
        assert (entry.nodes, entry.diameter) == TABLE8[key][:2]


@pytest.mark.parametrize("name", NAMES)
def test_entry(name):
    entry = CATALOGUE[name]
    n_expected, d_expected, ia_expected = TABLE8[name]
    G = _graph(name)

    # undirected simple graph
    assert type(G) is nx.Graph
    assert nx.number_of_selfloops(G) == 0

    # node count and labels 0..N-1
    assert G.number_of_nodes() == entry.nodes == n_expected
    assert sorted(G.nodes) == list(range(entry.nodes))

    # 4-regular, connected
    assert all(d == entry.degree == 4 for _, d in G.degree())
    assert G.number_of_edges() == 2 * entry.nodes
    assert nx.is_connected(G)

    # distance-regular with the expected parameters
    assert nx.is_distance_regular(G)
    b, c = _intersection_array(name)
    assert (b, c) == ia_expected
    assert len(b) == entry.diameter == d_expected
    assert nx.diameter(G) == d_expected


@pytest.mark.parametrize("name", NAMES)
def test_build_is_deterministic(name):
    G1 = CATALOGUE[name].build()
    G2 = CATALOGUE[name].build()
    assert list(G1.nodes) == list(G2.nodes)
    assert sorted(G1.edges) == sorted(G2.edges)


def test_tutte_12_cage_has_girth_12():
    cage = distreg._tutte12cage()
    assert cage.number_of_nodes() == 126
    assert all(d == 3 for _, d in cage.degree())
    assert nx.girth(cage) == 12


def test_tutte_8_cage_has_girth_8():
    cage = distreg._tutte8cage()
    assert cage.number_of_nodes() == 30
    assert all(d == 3 for _, d in cage.degree())
    assert nx.girth(cage) == 8


def test_paley9_is_rook_graph():
    rook = nx.cartesian_product(nx.complete_graph(3), nx.complete_graph(3))
    assert nx.is_isomorphic(_graph("paley9"), rook)


def test_octahedron_is_octahedral_graph():
    assert nx.is_isomorphic(_graph("octahedron"), nx.octahedral_graph())


def test_unknown_name_raises():
    with pytest.raises(ValueError) as exc:
        distreg_graph("no_such_graph")
    msg = str(exc.value)
    assert "unknown distance-regular graph 'no_such_graph'" in msg
    for name in CATALOGUE:
        assert name in msg
