"""The request side of the jobs (the API imports these before a job exists; the job kinds read them back).

    workloads           what a plan's workload asks for (message sizes, a training job)
    hybrid_workloads    a hybrid-parallel training workload (multi-GPU hosts)
    evaluation_request  an evaluation request checked and recorded
    failure_reports     failure reports that queue a revision; faults, repairs applied, revision look-ups
"""
