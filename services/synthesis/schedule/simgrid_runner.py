"""SimGrid replay of per-link transfer groups (run by `replay.simgrid_replay` under Debian's /usr/bin/python3,
whose `python3-simgrid` module it needs; standard library otherwise). Reads one JSON object on stdin:

    {"mode": "dependency" | "barrier", "links": [[alpha_s, bandwidth_Bps], ...],
     "groups": [[link, step, bytes, [groups it waits for]], ...]}     (groups sorted by step)

and prints {"time_s": the simulated makespan, "groups": G}. Every link is a SimGrid link of its own between two
hosts of its own (latency alpha_s, bandwidth bandwidth_Bps), the network model CM02 with latency and bandwidth
factors 1, TCP-gamma 0 (no window bound), no cross-traffic: a message of s bytes takes alpha + s / b. One actor
runs the groups as events: a link starts its next group (step order) when it is free and, in "dependency" mode,
every group it waits for has arrived, in "barrier" mode every group of the previous step has (Comm.sendto_async
between the link's hosts; Comm.wait_any for the next arrival). Sizes are scaled by a power of two (bandwidth
with them) so that integer message sizes keep 2^-40 relative precision.
"""
import json
import math
import os
import sys
import tempfile

import simgrid

CONFIG = ["network/model:CM02", "network/latency-factor:1", "network/bandwidth-factor:1", "network/TCP-gamma:0",
          "network/crosstraffic:0", "surf/precision:1e-15", "maxmin/precision:1e-12"]


def platform(links, scale):
    rows = ['<?xml version="1.0"?>', '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
            '<platform version="4.1">', '<zone id="fabric" routing="Full">', '<host id="ctl" speed="1Gf"/>']
    for k, (alpha, bw) in enumerate(links):
        rows.append(f'<host id="s{k}" speed="1Gf"/><host id="r{k}" speed="1Gf"/>')
        rows.append(f'<link id="l{k}" bandwidth="{bw * scale!r}Bps" latency="{alpha!r}s"/>')
    for k in range(len(links)):
        rows.append(f'<route src="s{k}" dst="r{k}" symmetrical="NO"><link_ctn id="l{k}"/></route>')
    rows += ["</zone>", "</platform>"]
    return "\n".join(rows)


def main():
    job = json.load(sys.stdin)
    links, groups, barrier = job["links"], job["groups"], job["mode"] == "barrier"
    largest = max([g[2] for g in groups] + [1.0])
    scale = 2.0 ** max(0, 52 - 12 - math.ceil(math.log2(largest + 1)))
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as fh:
        fh.write(platform(links, scale))
        path = fh.name
    try:
        engine = simgrid.Engine(["replay"] + [f"--cfg={c}" for c in CONFIG] + ["--log=root.thresh:warning"])
        engine.load_platform(path)
    finally:
        os.unlink(path)
    out = {}
    engine.host_by_name("ctl")
    simgrid.Actor.create("ctl", engine.host_by_name("ctl"), run, engine, links, groups, barrier, scale, out)
    engine.run()
    if out.get("left"):
        raise SystemExit(f"{out['left']} groups never ran (a dependency cycle or a missing group)")
    print(json.dumps({"time_s": out["time_s"], "groups": len(groups)}))


def run(engine, links, groups, barrier, scale, out):
    n_links = len(links)
    src = [engine.host_by_name(f"s{k}") for k in range(n_links)]
    dst = [engine.host_by_name(f"r{k}") for k in range(n_links)]
    queue = [[] for _ in range(n_links)]
    for g, (l, _, _, _) in enumerate(groups):
        queue[l].append(g)
    head = [0] * n_links
    waiting = [0] * len(groups)
    dependents = [[] for _ in groups]
    if barrier:
        steps = sorted({g[1] for g in groups})
        order = {t: i for i, t in enumerate(steps)}
        per_step = [0] * len(steps)
        for _, t, _, _ in groups:
            per_step[order[t]] += 1
        open_step = 0
        done_in_step = [0] * len(steps)
    else:
        for g, (_, _, _, deps) in enumerate(groups):
            waiting[g] = len(deps)
            for d in deps:
                dependents[d].append(g)
    busy = [False] * n_links
    active, owner = [], []
    finished = 0
    end = 0.0

    def startable(l):
        if busy[l] or head[l] >= len(queue[l]):
            return False
        g = queue[l][head[l]]
        return order[groups[g][1]] <= open_step if barrier else waiting[g] == 0

    def start(l):
        g = queue[l][head[l]]
        head[l] += 1
        busy[l] = True
        active.append(simgrid.Comm.sendto_async(src[l], dst[l], int(round(groups[g][2] * scale))))
        owner.append(g)

    for l in range(n_links):
        if startable(l):
            start(l)
    while active:
        k = simgrid.Comm.wait_any(active)
        active.pop(k)
        g = owner.pop(k)
        end = max(end, engine.clock)
        finished += 1
        l = groups[g][0]
        busy[l] = False
        touched = {l}
        if barrier:
            s = order[groups[g][1]]
            done_in_step[s] += 1
            if s == open_step and done_in_step[s] == per_step[s] and open_step + 1 < len(per_step):
                open_step += 1
                touched = range(n_links)
        else:
            for h in dependents[g]:
                waiting[h] -= 1
                touched.add(groups[h][0])
        for m in touched:
            if startable(m):
                start(m)
    out["time_s"] = end
    out["left"] = len(groups) - finished


if __name__ == "__main__":
    main()
