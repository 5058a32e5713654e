"""Stage 1, selection: which files are linted, as what, under which settings.

Knows: the user's settings (``settings.py``: ``[tool.txnsafety]``, flake8's ``txn-*``, one-line
errors naming the setting), which files a run covers (``files.py``: ``.gitignore`` through
pathspec, ``exclude``, ``force-exclude``), what each file is (``roles.py``: app, command,
test, migration, script; which are quiet) and how a file is read (``sources.py``: encoding,
size, ``# noqa``).

May import: ``facts`` (the analysis settings ``facts.config.Config`` it fills in, the
``Finding`` record).  Never ``flow``, ``project``, ``rules`` or ``report``.
"""
