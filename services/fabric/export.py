"""A fabric and its running jobs in the formats cluster schedulers read: Slurm's `topology.yaml` (the
topology/block plugin) and Kubernetes node labels with a Kueue topology (topology-aware scheduling).

The unit both formats describe is a *block*: a set of hosts a scheduler should keep a job inside.
- Every running plan's hosts form one block (TopoOpt section 3 and App. C: a job's servers and their optical
  ports are disjoint from every other job's, and its topology stays until it ends), named after the plan.
- The free hosts form one block per *reconfigurable group*: hosts whose ports land on the same panels, port by
  port (the same (tx panel, rx panel) pair for every host port k, on the active side). Within such a group the
  panels can realise any d-regular topology of the hosts (each panel carries one permutation, TopoOpt's
  TotientPerms layout), so a new job placed inside one group needs no cabling change; the TopoOpt layout
  (`planes`) is one group, a `shared` single panel too.

Slurm (topology.yaml(5), topology/block): a list of topologies, each `topology: NAME` first, then
`cluster_default` and `block: {block_sizes: [...], blocks: [{block: NAME, nodes: HOSTLIST}]}`. The base block
size is the smallest block's host count (every block holds at least one base block). Host ids must be valid
Slurm node names for a hostlist (no commas, brackets or white space): other ids are refused.

Kubernetes: one label set per host, keys under the `fabricplan.io/` prefix (a DNS subdomain, names of at most
63 characters) and values that satisfy the label-value syntax (at most 63 characters, alphanumerics with `-`, `_`,
`.` inside); a value that is not valid as given is rewritten (invalid characters to `-`, trimmed) with a short
hash appended so distinct ids stay distinct. The Kueue `Topology` lists the levels from the widest down:
group, block, host (`kubernetes.io/hostname`, Kueue's required lowest level for TAS).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from .model import Fabric, FabricError

__all__ = ["Block", "ExportError", "K8S_LABEL_PREFIX", "RunningJob", "blocks_of", "dns_name", "k8s_labels",
           "label_value", "reconfigurable_groups", "slurm_topology", "slurm_topology_yaml"]

K8S_LABEL_PREFIX = "fabricplan.io/"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SLURM_BAD = re.compile(r"[\s,\[\]]")


class ExportError(FabricError):
    """A fabric or job that the requested format cannot express (HTTP 422)."""


@dataclass(frozen=True)
class RunningJob:
    """A plan bound to the fabric and not released: its id and hosts."""

    plan_id: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """Hosts to keep a job inside: a running plan's hosts (`plan_id` set) or a free reconfigurable group."""

    name: str
    group: str
    hosts: tuple[str, ...]
    plan_id: str | None = None


def reconfigurable_groups(fabric: Fabric, sides: dict[str, int] | None = None) -> list[tuple[str, ...]]:
    """Hosts grouped by where their ports land, port by port: (tx panel, rx panel) of each host port on the
    host's active side (`sides`: host id -> side, default 0). Groups in the order of their first host.

    >>> from services.fabric.model import planes_fabric
    >>> [len(g) for g in reconfigurable_groups(planes_fabric(6, 2))]
    [6]
    """
    sides = sides or {}
    groups: dict[tuple, list[str]] = {}
    for host in fabric.hosts:
        side = sides.get(host.id, 0)
        key = tuple((p.side(side).tx.panel, p.side(side).rx.panel) for p in host.ports)
        groups.setdefault(key, []).append(host.id)
    return [tuple(g) for g in groups.values()]


def blocks_of(fabric: Fabric, jobs: Iterable[RunningJob], sides: dict[str, int] | None = None) -> list[Block]:
    """One block per running job, then one per reconfigurable group's free hosts (module docstring)."""
    groups = reconfigurable_groups(fabric, sides)
    group_of = {h: f"g{i}" for i, g in enumerate(groups) for h in g}
    busy: set[str] = set()
    out = []
    for job in sorted(jobs, key=lambda j: j.plan_id):
        unknown = [h for h in job.hosts if h not in group_of]
        if unknown:
            raise ExportError(f"plan {job.plan_id} holds host {unknown[0]!r}, which is not in fabric {fabric.id}")
        busy.update(job.hosts)
        job_groups = sorted({group_of[h] for h in job.hosts})
        out.append(Block(f"job-{job.plan_id}", "+".join(job_groups), tuple(job.hosts), job.plan_id))
    for i, g in enumerate(groups):
        free = tuple(h for h in g if h not in busy)
        if free:
            out.append(Block(f"free-g{i}", f"g{i}", free))
    return out


def slurm_topology(fabric: Fabric, blocks: Sequence[Block]) -> list[dict]:
    """The topology.yaml document as data: one block topology named `fabricplan-<fabric id>`."""
    for b in blocks:
        for h in b.hosts:
            if not h or _SLURM_BAD.search(h):
                raise ExportError(f"host id {h!r} is not a Slurm node name (no white space, commas or brackets)")
    sizes = [len(b.hosts) for b in blocks]
    block = {"block_sizes": [min(sizes)] if sizes else [],
             "blocks": [{"block": b.name, "nodes": ",".join(b.hosts)} for b in blocks]}
    return [{"topology": f"fabricplan-{fabric.id}", "cluster_default": False, "block": block}]


def _scalar(v) -> str:
    """A YAML scalar: JSON's quoted strings, booleans and numbers are valid YAML 1.2 (and libyaml) scalars."""
    return json.dumps(v)


def slurm_topology_yaml(fabric: Fabric, blocks: Sequence[Block]) -> str:
    """`slurm_topology` written as topology.yaml text (block style; `topology` first, as Slurm requires).

    >>> from services.fabric.model import planes_fabric
    >>> fab = planes_fabric(4, 2, fabric_id="f1")
    >>> print(slurm_topology_yaml(fab, blocks_of(fab, [RunningJob("p1", ("h0", "h1"))])))
    - topology: "fabricplan-f1"
      cluster_default: false
      block:
        block_sizes:
          - 2
        blocks:
          - block: "job-p1"
            nodes: "h0,h1"
          - block: "free-g0"
            nodes: "h2,h3"
    <BLANKLINE>
    """
    lines = []
    for topo in slurm_topology(fabric, blocks):
        lines += [f"- topology: {_scalar(topo['topology'])}",
                  f"  cluster_default: {_scalar(topo['cluster_default'])}",
                  "  block:", "    block_sizes:"]
        lines += [f"      - {_scalar(s)}" for s in topo["block"]["block_sizes"]]
        lines.append("    blocks:" if topo["block"]["blocks"] else "    blocks: []")
        for b in topo["block"]["blocks"]:
            lines += [f"      - block: {_scalar(b['block'])}", f"        nodes: {_scalar(b['nodes'])}"]
    return "\n".join(lines) + "\n"


def label_value(raw: str) -> str:
    """`raw` as a valid Kubernetes label value: itself when valid, else rewritten with a hash suffix.

    >>> label_value("plan_7"), label_value("a/b c")
    ('plan_7', 'a-b-c-0af99a')
    """
    if len(raw) <= 63 and _LABEL_VALUE.match(raw):
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:6]
    body = re.sub(r"[^-A-Za-z0-9_.]", "-", raw)[:56].strip("-_.")
    return f"{body}-{digest}" if body else digest


def dns_name(raw: str) -> str:
    """`raw` as a Kubernetes object name (an RFC 1123 DNS subdomain: lower-case alphanumerics, `-` and `.`,
    at most 253 characters): itself when valid, else rewritten with a hash suffix.

    >>> dns_name("fabricplan-f1"), dns_name("Fab_1")
    ('fabricplan-f1', 'fab-1-b2ee82')
    """
    if len(raw) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", raw):
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:6]
    body = re.sub(r"[^-a-z0-9.]", "-", raw.lower())[:240].strip("-.")
    return f"{body}-{digest}" if body else digest


def k8s_labels(fabric: Fabric, blocks: Sequence[Block]) -> dict:
    """Node labels per host and the Kueue `Topology` whose levels name them (module docstring)."""
    labels: dict[str, dict[str, str]] = {}
    for b in blocks:
        for h in b.hosts:
            one = {f"{K8S_LABEL_PREFIX}fabric": label_value(fabric.id),
                   f"{K8S_LABEL_PREFIX}group": label_value(b.group),
                   f"{K8S_LABEL_PREFIX}block": label_value(b.name)}
            if b.plan_id is not None:
                one[f"{K8S_LABEL_PREFIX}plan"] = label_value(b.plan_id)
            labels[h] = one
    topology = {"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Topology",
                "metadata": {"name": dns_name(f"fabricplan-{fabric.id}")},
                "spec": {"levels": [{"nodeLabel": f"{K8S_LABEL_PREFIX}group"},
                                    {"nodeLabel": f"{K8S_LABEL_PREFIX}block"},
                                    {"nodeLabel": "kubernetes.io/hostname"}]}}
    return {"labels": labels, "topology": topology}
