"""txnsafety: catch lost writes (data stomping) in Python web applications.

The runtime checker's public API.  The lock service is :mod:`txnsafety.locks`,
the integrations are :mod:`txnsafety.django` and :mod:`txnsafety.sqlalchemy`,
the linter is the separate package ``txnsafety_lint``.
"""
from __future__ import annotations

from .checker import forget, read_stamp, record_read, record_stale_lock, record_write, single_writer
from .codes import CODES, Code
from .config import ConfigurationError, configure, settings
from .context import (Priority, RequestScope, Transaction, current_scope, current_transaction,
                      held_leases, request_scope, transaction)
from .declared_locks import declared_lock, serializing
from .policies import (abstract, dangerously_written_outside_transaction,
                       dangerously_written_outside_transaction_or_user_lock, embedded, never_written,
                       policy_of, register_policy, structured_property, versioned, written_by_single_writer,
                       written_in_transaction, written_in_transaction_or_user_lock, written_once,
                       written_via_cron, written_with_user_lock)
from .report import StompingError, Violation, add_listener, remove_listener, suppress, suppress_in_test

#: The one source of the version: setup.cfg reads it (``attr:``), the CLI, the flake8
#: plugin and SARIF output import it.
__version__ = "0.1.0"

__all__ = [
    "CODES", "Code", "ConfigurationError", "Priority", "RequestScope", "StompingError", "Transaction", "Violation",
    "abstract", "add_listener", "configure", "current_scope", "current_transaction",
    "dangerously_written_outside_transaction", "dangerously_written_outside_transaction_or_user_lock",
    "declared_lock", "embedded", "forget", "held_leases", "never_written", "policy_of", "read_stamp", "record_read",
    "record_stale_lock", "record_write", "register_policy", "remove_listener", "request_scope",
    "serializing", "settings", "single_writer", "structured_property", "suppress", "suppress_in_test", "transaction",
    "versioned", "written_by_single_writer", "written_in_transaction", "written_in_transaction_or_user_lock",
    "written_once", "written_via_cron", "written_with_user_lock",
]
