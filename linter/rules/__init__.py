"""The rules: each code's judgement, one module per family, fed by events and facts.

Knows: the registry (``registry.py``: every code, its default, its page, its eval files, where
it is decided), which rules hear which events (``subscriptions.py``: :data:`RULES`, handed to
the walk by the entry points) and one module per family of verdicts: ``read_modify_write.py``
(TXN101, TXN102, TXN104, TXN106, TXN109), ``two_copies.py`` (TXN103), ``check_then_act.py``,
``claim.py``, ``consume.py``, ``get_or_create.py``, ``lazy_lock.py`` (TXN105),
``side_effect.py`` (TXN107), ``lock_outside_transaction.py`` and ``locked_get_or_create.py``
(TXN108).  Each handler takes the function's state (``flow.state.FunctionState``) and an
event, decides, builds its message and reports.

May import: ``flow`` (its events, state and records, never the walk), ``facts`` and
``txnsafety.codes``.  Imported only by the entry points.  This ``__init__`` imports nothing,
so ``registry.py`` stays a leaf any stage may read.
"""
