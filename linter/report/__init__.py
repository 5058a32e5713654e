"""Stage 6, report: findings shown to people and tools.

Knows: the output formats (``formats.py``: text, JSON, SARIF 2.1.0, GitHub annotations),
the terminal (``console.py``: colour, the per-code statistics), flake8's formatters
(``flake8_format.py``), a finding's stable identity (``identity.py``: fingerprints that
survive edits elsewhere in the file) and baselines (``baseline.py``).

May import: ``facts`` (the ``Finding`` record), ``selection`` (file roles) and
``txnsafety.codes``.  A new output format goes in ``formats.py`` (``FORMATS``) or, if it
is large, in a module of its own here.
"""
