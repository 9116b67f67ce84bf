"""Stage 8, render: a ``Summary`` -> figures, an HTML report, a Perfetto trace, a comparison of two runs.

In: Summaries (and, for the timeline and export, a rank's events read again from its file). Out: plotly figures,
HTML, Trace Event Format JSON, ``Comparison`` tables. Nothing here changes a number: it only shows them.

Open first: ``charts.py`` (the charts the viewer and the report share). ``charts_run.py`` draws the whole run and
the what-ifs, ``charts_ops.py`` the kernels, operators and memory (``charts_roofline.py`` the roofline),
``timeline.py`` one rank's lanes, ``report.py`` the self-contained HTML file, ``export.py`` the Perfetto trace,
``compare.py`` (with ``compare_ops.py``, by op and kernel) two runs side by side. plotly is imported here only, so
``import tracekit`` stays light.
"""
