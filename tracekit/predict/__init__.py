"""Stage 5, predict: the run's dependency graph -> the critical path and what-if step times.

In: the run graph of ``tracekit.run.rungraph``. Out: the critical path per step (and its events), and one predicted
step time per scenario, with the findings' predicted savings.

Open first: ``replay.py`` (the discrete-event replay every prediction runs), then ``scenarios.py`` (what each
scenario changes) and ``critical_path.py`` (the chain of events that ends a step, walked back through the replay);
``longest.py`` is the compiled pass, ``optimize.py`` where optimisation pays (ops at their roofline).
"""
