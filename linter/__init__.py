"""txnsafety_lint: static analysis for data stomping (flake8 plugin, CLI, pre-commit).

The package is laid out as its pipeline, one sub-package per stage, each importing only the
stages below it (``tests/test_import_graph.py`` enforces it)::

    selection ──► facts ──► flow ──► rules ──► report
    (files)       (what the   (one function   (verdicts)  (text, JSON,
                   code says)  walked, events)              SARIF, GitHub)
                               project: modules driven, calls joined, the index

The entry points sit here at the top: ``cli.py`` (``txnsafety lint``), ``flake8_plugin.py``,
``runner.py`` (one lint run over paths) and ``analysis.py`` (one module or a project, with
the rules wired to the walk).  ``docs/architecture.md`` is the map.
"""
