"""The jobs the workers run (DESIGN 4.2; docs/architecture.md), in three layers. Importing this package imports
none of them.

    kinds/      the job kinds: what a worker task runs (only workers/ and the API's dispatcher import these;
                no kind imports another)
    stages/     the machinery the kinds share: attempts and progress, artifacts, schedule sets, the compile
                stage and its processes, the all-to-all build, predicted costs
    requests/   the request side: what a plan's workload asks for, an evaluation request checked and
                recorded, failure reports that queue a revision (the API imports these before a job exists)

Kinds import stages and requests; stages and requests import no kind.
"""
