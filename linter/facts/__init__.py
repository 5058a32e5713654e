"""Stage 2, facts: what the code declares, read from ``ast`` or libcst, judged nowhere.

Knows: the analysis settings and vocabulary (``config.py``), the plain records everything
passes around (``model.py``: scopes, entities, mutations, checks, acts, findings), how the
source spells things (``syntax.py``, ``ast_names.py``, ``tree_nodes.py``), per-module facts
(``module_facts.py``: frameworks, models, managers, policies), the project's own
transactions and locks (``wrappers.py``), unique keys (``constraints.py``), relations
(``relations.py``), where a value comes from (``provenance.py``), sessions
(``sessions.py``, ``session_facts.py``, ``session_shapes.py``), how a query selects rows
(``query_selection.py``), which fields a method reads (``self_reads.py``), lazy row locks
(``lazy_locks.py``) and the cheap text test of what is worth parsing (``prefilter.py``).

May import: only ``facts`` itself, and ``rules/registry.py`` (a leaf of data: the codes and
their defaults, which ``config.py`` validates settings against).  A new fact about the code
goes here when it can be read from one module's syntax without walking a function.
"""
