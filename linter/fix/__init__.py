"""Fixes: the rewrite of the racy code a finding points at (``txnsafety lint --fix``).

The rules decide what is wrong; the modules here decide whether a mechanical rewrite keeps
the code's behaviour except for the race, and write it.  One module per family of fixes
(:mod:`.counters`, :mod:`.lock_scope`, :mod:`.locked_read`, :mod:`.exists_create`, the
SQLAlchemy :mod:`.sqla_insert`, :mod:`.user_lock`), what they read of the project beside the
file (:mod:`.mapped`, :mod:`.dialects`, :mod:`.policy_lock`), the
typed result in :mod:`.model`, which fixer answers which code in :mod:`.plan`, applying and
showing it in :mod:`.apply` and :mod:`.diff`.
"""
