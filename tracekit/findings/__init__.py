"""Stage 6, findings: the run's tables -> what to change.

In: the per-rank, collective, FSDP and gap tables. Out: a tuple of ``Finding`` (kind, severity, ranks, the numbers
that fired it, a recommendation), in the order the checks ran.

Open first: ``checks.py`` (``find`` and the idle and host checks). ``finding.py`` holds the Finding type and
severity rules, ``comm_findings.py`` the communication checks, ``fsdp_findings.py`` those for sharded training.
"""
