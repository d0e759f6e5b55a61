"""The jobs the workers run (DESIGN 4.2; docs/architecture.md): one module per job kind, the machinery they
share, and what they read and write. Importing this package imports none of them.

Job kinds (only workers/ and the API's dispatcher import these):

    plan/          the plan job, one module per family of stages: select (frontier, selection; training),
                   fabric, schedules (and alltoall), finish
    compiling      compile jobs: a plan's compile stage and on-demand compiles
    evaluation     topology evaluations
    revision       plan revisions after link failures (repair, schedules, compile, finish)

Shared (job kinds and the API import these; they import no job kind):

    attempts            attempt numbers, claim, Superseded, progress, failing a job with a reason
    artifacts           artifact serialisation: topology JSON and GraphML, link loads, schedule JSON, BFB blocks
    workloads           what a plan's workload asks for
    frontiers           the cached Pareto frontier
    evaluation_request  an evaluation request checked and recorded
    failure_reports     failure reports that queue a revision; faults, repairs applied, revision look-ups
    revision_cost       what a failure costs (predicted times, ring fallback)
"""
