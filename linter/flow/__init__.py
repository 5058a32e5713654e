"""Stage 3, flow: one function walked in statement order, its state and its events.

Knows: the walk (``walk.py``, assembled from one part per kind of syntax: ``statements.py``,
``reads.py``, ``assign.py``, ``calls.py``, ``writes.py``, ``checks.py``, with helpers for
conditions, helper lookups, row streams and SQLAlchemy queries kept in names), the state it
fills in (``state.py``: the function's model, which the rules read), the typed events it emits
(``events.py``), the records it keeps (``records.py``) and the rules as it sees them
(``subscribers.py``: handlers per kind of event, handed in from the top).

May import: ``facts``.  Never a rule: the walk judges nothing, it publishes events to the
:class:`~.subscribers.Subscribers` its driver was given.  A new fact that needs the order of
statements (what a name holds here, what protection is held now) goes to the part that sees
its syntax, and, if a rule must hear of it, to a new event in ``events.py``.
"""
