"""Stage 4, project: modules driven, calls joined, summaries shared, results indexed.

Knows: one module's driver (``module_analysis.py``: which functions to walk, loaders on
demand), the whole project's steps (``project_analysis.py``: which modules, facts shared
through imports), call sites joined to callees (``call_joins.py``: summaries flow up, each
join handed to the rules as a ``CallResolved`` event, deferred findings settled), model
methods resolved across classes (``method_callers.py``), parameters handed down a chain
of calls (``param_chains.py``), functions only quiet code calls (``callers.py``) and the
on-disk index every entry point reuses (``index.py``).

May import: ``flow``, ``facts``, ``selection``.  Never a rule: the rules it hands events to
come from the entry points (``txnsafety_lint.analysis``).
"""
