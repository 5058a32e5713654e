"""The rule registry: one entry per code the linter reports, the one place to start from.

Each :class:`Rule` names its code (kind and summary come from the shared table in
``txnsafety.codes``), whether it is on by default, the page that documents it
(``docs/codes/TXNnnn.md``, whose examples run as tests), the eval files that hold its bad
and good twins (``fixtures/lint/``, each bad line marked ``# expect: TXNnnn``), and where
its judgement is made. The configuration (known codes, opt-in codes), the SARIF rules and
the docs tables derive from this registry, and ``tests/linter/test_registry.py`` checks that
every entry's page, examples and judging code exist, so a grep for a code lands here first.

Runtime-only codes (TXN110-TXN112) have no rule: the linter cannot see what they judge.
"""
from __future__ import annotations

import dataclasses
import enum

from txnsafety.codes import CODES, Code


class Default(enum.Enum):
    """Whether a rule reports without being asked."""

    ON = "on"
    OPT_IN = "opt-in"          # depends on a fact of the deployment (the isolation level)


@dataclasses.dataclass(frozen=True)
class Rule:
    code: str
    #: ``module:function`` (or ``module:Class.method``) where the verdict is made
    decided_in: str
    examples: tuple[str, ...]
    default: Default = Default.ON

    @property
    def meta(self) -> Code:
        return CODES[self.code]

    @property
    def page(self) -> str:
        """The code's page, relative to the repository root."""
        return f"docs/codes/{self.code}.md"


_RMW = "txnsafety_lint.rules.read_modify_write:judge"

RULES: dict[str, Rule] = {r.code: r for r in (
    Rule("TXN101", _RMW, ("django_txn101.py", "sqlalchemy_txn101.py")),
    Rule("TXN102", _RMW, ("django_txn102.py", "sqlalchemy_txn102.py", "django_real_shapes.py",
                          "django_value_provenance.py", "sqlalchemy_value_provenance.py")),
    Rule("TXN103", "txnsafety_lint.rules.two_copies:overwritten_by",
         ("django_txn103.py", "sqlalchemy_txn103.py")),
    Rule("TXN104", _RMW, ("django_txn104.py", "sqlalchemy_txn104.py")),
    # compare-and-set claims: rules/claim.py:claimed; rows used then consumed:
    # rules/consume.py:observe; get_or_create() over no unique key:
    # rules/unkeyed_get_or_create.py:on_call (all fed by the same walk)
    Rule("TXN105", "txnsafety_lint.rules.check_then_act:depends_on",
         ("django_txn105.py", "sqlalchemy_txn105.py", "django_real_shapes.py",
          "sqlalchemy_kept_statements.py", "django_minted_keys.py", "sqlalchemy_object_layer.py",
          "django_txn105_claim.py", "sqlalchemy_txn105_claim.py", "django_across_rows.py",
          "django_row_handoffs.py", "django_txn105_helper_check.py",
          "sqlalchemy_txn105_helper_check.py", "django_judged_shapes.py", "sqlalchemy_judged_shapes.py",
          "sqlalchemy_keys_in_view.py")),
    Rule("TXN106", _RMW, ("django_txn106.py", "sqlalchemy_txn106.py", "generic_object_layer.py",
                          "sqlalchemy_awaited_results.py", "django_try_handlers.py",
                          "django_commit_switches.py")),
    Rule("TXN107", "txnsafety_lint.rules.side_effect:fires",
         ("django_txn107.py", "sqlalchemy_txn107.py")),
    Rule("TXN108", "txnsafety_lint.rules.lock_outside_transaction:settle",
         ("django_txn108.py",)),        # sqlalchemy_txn108.py: only safe twins (autobegin)
    Rule("TXN109", _RMW, ("django_txn109.py", "sqlalchemy_txn109.py"), Default.OPT_IN),
)}
