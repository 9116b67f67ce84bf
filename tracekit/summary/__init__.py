"""Stage 7, summary: everything measured -> one frozen ``Summary``, and its text report.

In: the tables of the stages below. Out: ``Summary`` (``model.py``), its typed run facts ``RunFacts`` (``facts.py``)
and ``text.text_report``, which ``print(summary)`` shows.

Open first: ``model.py``. The text report lives here, not in ``tracekit.render``, because ``Summary.__str__`` is
the report: every other renderer only reads a Summary.
"""
