"""The cost-equivalent fat-tree of TopoOpt section 5.1 from Table 2's prices (App. G), counted by hand."""
from __future__ import annotations

import pytest

from services.fabric import planes_fabric
from services.fabric.cost import cost_equivalent_ratio, fabric_cost, fat_tree_cost


def test_cost_equivalent_ratio_of_topoopts_shared_cluster_by_hand():
    # 432 hosts, d = 8, B = 100 Gbps. Fat-tree at 800 Gbps a host: k = 12, 5 k^3 / 4 = 2160 switch ports,
    # 3 k^3 / 4 = 1296 links; every part in 8 lanes of 100 Gbps (NIC $678, transceiver $99, switch port $187,
    # two 500 m fibers at $0.30/m a link)
    lanes = 8
    fat_tree = (432 * 678 + (432 + 2160) * 99 + 2160 * 187 + 2 * 1296 * 150) * lanes
    # TopoOpt: 3456 ports with a NIC and a transceiver each, a patch-panel port on each of the two planes ($100),
    # a 1x2 switch ($25), two fibers per port and plane
    ports = 432 * 8
    topoopt = ports * (678 + 99) + 2 * ports * 100 + ports * 25 + 2 * 2 * ports * 150
    assert cost_equivalent_ratio(432, 8, 100) == pytest.approx(fat_tree / topoopt)
    assert 800 / cost_equivalent_ratio(432, 8, 100) == pytest.approx(412.5, abs=0.5)   # Gbps a host, same cost


@pytest.mark.parametrize("hosts, degree, gbps", [(64, 4, 100.0), (32, 8, 25.0), (16, 2, 400.0)])
def test_cost_equivalent_ratio_counts_what_fabric_cost_counts(hosts, degree, gbps):
    topoopt = fabric_cost(planes_fabric(hosts, degree, lookahead=True), gbps).total_usd
    assert cost_equivalent_ratio(hosts, degree, gbps) == pytest.approx(
        fat_tree_cost(hosts, degree * gbps).total_usd / topoopt)
