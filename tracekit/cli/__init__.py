"""Stage 9, cli: the ``tracekit`` command, a thin layer over the library.

In: command-line arguments. Out: text, JSON or files, and an exit status (0, 2 for bad input, 3 for a bug).

Open first: ``main.py`` (one ``_add_<name>``/``_<name>`` pair per subcommand). ``options.py`` holds the options
several subcommands share; ``whatif.py`` and ``view.py`` the subcommands of those names. With ``api.py``,
``__init__.py`` and ``__main__.py`` at the package root, this is the front door.
"""
