"""Which channel a shard travels on: spreading every link's messages over the channels.

A unit of shard v (services.compiler.msccl.messages, pass 1) goes on channel lane x (instances x channels) + j x
channels + class_c(v). Because the class depends on the shard alone, a forwarded piece keeps its channel (so
receive-and-forward pairs can fuse), and every classing below refines: for c | c' the channels at c' split those at
c (what fit_msccl's "x channels divide a connection's messages at best evenly" relies on).

A message is a run of consecutive units on one channel, so a classing should both balance a link's shards over
the channels and keep the shards a link carries together in one step on one channel. Three are candidates:

* dealt in shard order, class_c(v) = v mod c: on ring-like schedules a link carries one shard per step, and
  consecutive shards over the steps, which this deals out perfectly evenly;
* in blocks, class_c(v) = v c // N: keeps consecutive shards together. A reduce-scatter on a line graph sends a
  contiguous range of shards per link and step (the shards reachable through an arc are the arcs leaving a set
  of vertices, numbered tail x d + port), so dealing them out cuts every range into single shards: on the
  degraded 1024-rank line graph of bench.failures the reduce-scatter needed 8 channels and 2.1 M XML steps
  dealt, and fits at 2 channels in 0.45 M steps in blocks;
* dealt after a seeded pseudo-random permutation: an allgather on a line graph receives on one link shards that
  share residues (scattered in shard order), so v mod c uses few of the channels: on line(circulant(16, 1, 4),
  3) the busiest 1024-rank allgather connection-channel carries 95 (step, shard) pairs at 8 channels in shard
  order and 45 permuted (the binomial spread of a random split), enough for RCCL's 64 steps per thread block.

`shard_classes` scores each on the schedule: per connection-channel, the runs of consecutive shards it carries
in one step on one channel (a lower bound on its messages wherever units sit in shard order), summed over the
steps; the busiest connection-channel's, summed over 2, 4, ..., 32 channels. The lowest wins; ties keep the
earlier of dealt, blocks, permuted, so ring-like programs keep their numbering.

Separate send and receive thread blocks need no fixed channel per shard (nothing fuses), and
services.compiler.msccl.messages.Messages.by_message deals the messages themselves instead: fewer and evener per thread
block than any classing (on the 1024-rank allreduce of line(circulant(16, 1, 4), 3) at 8 channels, 36 messages
on the busiest connection-channel against up to 61), for sends that may wait on receives of every channel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.synthesis.schedule.ir import Schedule

from ..common.arrays import unique, unique_inverse

__all__ = ["ShardChannels", "shard_classes", "busiest_connection_channel", "PERMUTATION_SEED", "CHANNEL_COUNTS"]

PERMUTATION_SEED = 0x5EED
CHANNEL_COUNTS = (2, 4, 8, 16, 32)


@dataclass(frozen=True)
class ShardChannels:
    """class_c(v) = rank[v] mod c (dealt), or rank[v] c // N (blocks); rank is a permutation of the shards."""

    rank: np.ndarray
    blocks: bool = False
    name: str = "dealt"

    @classmethod
    def identity(cls, nodes: int) -> "ShardChannels":
        return cls(np.arange(nodes, dtype=np.int64))

    def of(self, v: np.ndarray, channels: int) -> np.ndarray:
        r = self.rank[v]
        return r * channels // self.rank.size if self.blocks else r % channels


def _pairs(schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(connection index, shard, follows) of every distinct (sender, receiver, lane, step, shard) of the schedule,
    sorted by connection, step and shard; follows: the previous pair is shard v - 1 on the same connection and
    step."""
    n = schedule.nodes
    u, w = schedule.sender.astype(np.int64), schedule.receiver.astype(np.int64)
    lane, v = schedule.lane.astype(np.int64), schedule.source.astype(np.int64)
    lanes = int(lane.max()) + 1
    conn = (u * n + w) * lanes + lane
    key = unique((conn * (schedule.steps + 1) + schedule.step_of.astype(np.int64)) * n + v)
    _, idx = unique_inverse(key // ((schedule.steps + 1) * n))
    follows = np.r_[False, key[1:] == key[:-1] + 1] if key.size else np.zeros(0, bool)
    return idx, key % n, follows


def busiest_connection_channel(conn: np.ndarray, shard: np.ndarray, follows: np.ndarray, classes: ShardChannels,
                               channels: int) -> int:
    """The most runs of consecutive shards (per step) one connection carries on one channel (`_pairs`)."""
    if conn.size == 0:
        return 0
    cls = classes.of(shard, channels)
    starts = ~follows
    starts[1:] |= cls[1:] != cls[:-1]
    return int(np.bincount(conn * channels + cls, weights=starts).max())


def shard_classes(schedule: Schedule) -> ShardChannels:
    """The classing of the shards (module docstring) for `schedule`."""
    n = schedule.nodes
    identity = ShardChannels.identity(n)
    if schedule.transfers == 0 or n < 3:
        return identity
    perm = np.random.Generator(np.random.PCG64(PERMUTATION_SEED)).permutation(n).astype(np.int64)
    candidates = [identity, ShardChannels(identity.rank, blocks=True, name="blocks"),
                  ShardChannels(perm, name="permuted")]
    conn, shard, follows = _pairs(schedule)
    costs = [sum(busiest_connection_channel(conn, shard, follows, c, k) for k in CHANNEL_COUNTS) for c in candidates]
    return candidates[int(np.argmin(costs))]
