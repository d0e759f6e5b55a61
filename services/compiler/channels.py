"""Which channel a shard travels on: spreading every link's shards evenly over the channels.

A unit of shard v (services.compiler.msccl pass 1) goes on channel lane x (instances x channels) + j x channels
+ class(v) mod channels. Because the class depends on the shard alone, a forwarded piece keeps its channel (so
receive-and-forward pairs can fuse), and for channel counts c | c' the channels at c' refine those at c (what
fit_msccl's "x channels divide a connection's messages at best evenly" relies on).

Two classings are candidates:

* the identity, class(v) = v: on ring-like schedules a link carries consecutive shards, which v mod c deals out
  perfectly evenly;
* a seeded pseudo-random permutation of the shards: on topologies whose node numbering has structure the
  identity can be badly skewed. In a line graph (node = arc, numbered tail x d + port) the shards a link carries
  share residues, so v mod c uses few of the channels: on line(circulant(16, 1, 4), 3), 1024 ranks, the busiest
  allgather connection-channel carries 95 (step, shard) pairs at 8 channels with the identity and 45 with the
  permutation (the binomial spread of a random split), 60 against 29 at 16 channels.

`shard_classes` takes, per schedule, the classing whose busiest connection-channel carries fewer (step, shard)
pairs summed over 2, 4, ..., 32 channels (the identity on ties, so ring-like programs keep their numbering). A
(step, shard) pair on a connection is at least one message, so this is what the runtimes' steps-per-thread-block
limit sees first.
"""
from __future__ import annotations

import numpy as np

from services.synthesis.schedule.ir import Schedule

from .arrays import unique, unique_inverse

__all__ = ["shard_classes", "busiest_connection_channel", "PERMUTATION_SEED", "CHANNEL_COUNTS"]

PERMUTATION_SEED = 0x5EED
CHANNEL_COUNTS = (2, 4, 8, 16, 32)


def _pairs(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """(connection index, shard) of every distinct (sender, receiver, lane, step, shard) of the schedule."""
    n = schedule.nodes
    u, w = schedule.sender.astype(np.int64), schedule.receiver.astype(np.int64)
    lane, v = schedule.lane.astype(np.int64), schedule.source.astype(np.int64)
    lanes = int(lane.max()) + 1
    conn = (u * n + w) * lanes + lane
    key = unique((conn * (schedule.steps + 1) + schedule.step_of.astype(np.int64)) * n + v)
    _, idx = unique_inverse(key // ((schedule.steps + 1) * n))
    return idx, key % n


def busiest_connection_channel(conn: np.ndarray, shard_class: np.ndarray, channels: int) -> int:
    """The most (step, shard) pairs one connection carries on one channel (`conn`, `shard_class` per pair)."""
    if conn.size == 0:
        return 0
    return int(np.bincount(conn * channels + shard_class % channels).max())


def shard_classes(schedule: Schedule) -> np.ndarray:
    """class(v) per shard v (module docstring): the identity, or the seeded permutation when it spreads the
    busiest connection-channel over fewer (step, shard) pairs."""
    n = schedule.nodes
    identity = np.arange(n, dtype=np.int64)
    if schedule.transfers == 0 or n < 3:
        return identity
    conn, shard = _pairs(schedule)
    perm = np.random.Generator(np.random.PCG64(PERMUTATION_SEED)).permutation(n).astype(np.int64)
    cost_id = sum(busiest_connection_channel(conn, shard, c) for c in CHANNEL_COUNTS)
    cost_perm = sum(busiest_connection_channel(conn, perm[shard], c) for c in CHANNEL_COUNTS)
    return perm if cost_perm < cost_id else identity

