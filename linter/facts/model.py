"""Plain data the analysis passes around: scopes, entities, checks, findings."""
from __future__ import annotations

import dataclasses
import enum
from typing import Mapping, Optional


class _Level(enum.IntEnum):
    """A three-step scale a setting names by its lower-case label (``min-confidence = "low"``)."""

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> "_Level":
        try:
            return cls[str(text).strip().upper()]
        except KeyError:
            raise ValueError(f"expected one of low, medium, high, not {text!r}") from None


class Confidence(_Level):
    """How sure a finding is that the write can be lost, from what the source shows.

    ``HIGH``: a value derived from the read is written back (a counter, an appended list, a
    check and then an insert) with nothing the linter can see protecting the pair.
    ``LOW``: a stale copy of the whole row is saved after changes that derive nothing from
    the read (``x.status = "paid"; x.save()``): it loses another request's write only if one
    changes *other* columns of that row in between, which the source cannot show; also a
    ``save(update_fields=...)`` whose values are made only from other columns of the read.  Shown with
    ``--min-confidence low`` (``min-confidence = "low"``); the default shows ``medium`` and up.
    """

    LOW = 1
    MEDIUM = 2
    HIGH = 3


class Severity(_Level):
    """How much a finding is worth fixing first: how likely the race is and what it costs.

    Beside :class:`Confidence` (how sure the analysis is), as bandit keeps severity and
    confidence apart.  ``HIGH``: a row many requests or workers write (shared) and a value
    whose loss costs (a counter, an amount, a limit, a one-time token, a state transition).
    ``LOW``: a row of the request's own user (owned) and a value whose loss costs little (a
    label, a timestamp, a statistic), or a get-or-create on an owned key.  ``MEDIUM``: the
    rest.  The default output shows ``medium`` and up (``--min-severity``)."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3


@dataclasses.dataclass(frozen=True)
class Assessment:
    """A finding's severity and why, in a few words (``shared: every request writes this
    `Voucher`; high harm: `uses` is a counter``)."""

    severity: Severity
    reason: str


#: what a finding gets when its rule says nothing of severity
UNASSESSED = Assessment(Severity.MEDIUM, "")


class Need(enum.Enum):
    """What a caller must hold around a call for an unprotected helper's write to count as
    protected (the model's policy decides: ``module_facts.protection_needed``)."""

    ANY = "any"           # any transaction or lock
    TXN = "txn"           # a transaction (``@written_in_transaction``; a row lock outlives no statement without one)
    LOCK = "lock"         # a lock (``@written_with_user_lock``)

    def held_by(self, scopes: tuple) -> bool:
        """Whether ``scopes`` (the transactions and locks held at a call) hold it."""
        return any(s.kind == self.value for s in scopes) if self is not Need.ANY else bool(scopes)


@dataclasses.dataclass(frozen=True)
class Finding:
    line: int
    col: int
    code: str
    message: str
    path: str = ""
    #: qualified name of the enclosing function or class (``Shop.checkout``); None at
    #: module level.  Part of the finding's identity (fingerprints), not of its position.
    function: Optional[str] = None
    confidence: Confidence = Confidence.HIGH
    #: how much it is worth fixing first (rules/severity.py), and why
    severity: Severity = Severity.MEDIUM
    severity_reason: str = ""

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.col, self.code)


@dataclasses.dataclass(eq=False)
class Scope:
    """A transaction or lock that protects the statements inside it."""

    kind: str                 # "txn" or "lock"
    label: str                # how the source spells it, e.g. "transaction.atomic()"
    line: int
    retrying: bool = False
    serializable: bool = False
    decorator: bool = False
    session: Optional[str] = None
    framework: Optional[str] = None
    #: where the scope is when it is not the reporting function's own, e.g. "in `load()`, "
    #: for a helper's transaction that ended when the helper returned an entity
    where: str = ""


@dataclasses.dataclass
class Mutation:
    line: int
    attr: str
    kind: str                 # "blind" | "derived" | "counter" | "atomic"
    #: derived from the same field's old value (``x.n += 1``, ``x.tags.append(t)``)
    own: bool = False
    #: the value is a constant (``"paid"``, ``None``, ``Status.DONE``): every writer writes the same
    constant: bool = False
    #: the row's own fields the value was made from (through ``self``'s methods too: ``facts/self_reads.py``)
    reads: frozenset = frozenset()


@dataclasses.dataclass(eq=False)
class Entity:
    name: str
    read_line: int
    scopes: tuple
    source: str               # "get" | "param" | "loop" | "call" (returned by a helper)
    model: Optional[str] = None
    getter: Optional[str] = None
    key: Optional[str] = None
    framework: Optional[str] = None
    for_update: bool = False
    locked_read: bool = False
    maybe_none: bool = False
    versioned: bool = False
    pending: list = dataclasses.field(default_factory=list)
    writes: list = dataclasses.field(default_factory=list)
    released_line: Optional[int] = None
    had_rmw: bool = False
    session: Optional[str] = None
    #: for source "call": the helper that read it, e.g. "`load()` (auth.py line 5)"
    via: Optional[str] = None
    #: the model's txnsafety policy decorator, e.g. "written_with_user_lock" (None: none known)
    policy: Optional[str] = None
    #: the columns the read's lookup compared for equality (None: not known)
    lookup: Optional[frozenset] = None
    #: what the lookup's values are made from (``facts.syntax.lookup_values``)
    lookup_values: frozenset = frozenset()
    #: the columns the read selected the row by state (``status="new"``, ``lock__lt=t``:
    #: ``facts/query_selection.py``): a later write of one is the set of a compare-and-set (``rules/claim.py``)
    state: frozenset = frozenset()

    def relevant(self, kind: str, fields: Optional[set] = None) -> list:
        """The pending mutations that make a write of ``kind`` a read-modify-write."""
        if kind == "whole":
            return [m for m in self.pending if m.kind != "atomic"]
        if kind == "fields":
            return [m for m in self.pending if m.kind in ("derived", "counter")
                    and (fields is None or m.attr in fields)]
        return [m for m in self.pending if m.kind in ("derived", "counter")]


class CheckKind(str, enum.Enum):
    """What a check-then-act check looked at."""

    EXISTS = "exists"          # ``.exists()``: is there a row?
    NONE = "none"              # a lookup that may find nothing (``first()``, ``DoesNotExist``)
    COUNT = "count"            # a count compared with something
    LIMIT = "limit"            # a row's own field compared with a limit
    AGGREGATE = "aggregate"    # a value computed from the table (``Max("n") + 1``)
    UPDATED = "updated"        # the rows an update matched (none: insert instead)

    @property
    def missing_row(self) -> bool:
        return self in (CheckKind.EXISTS, CheckKind.NONE, CheckKind.UPDATED)


@dataclasses.dataclass(eq=False)
class Check:
    """A check the walk saw, for the check-then-act rule (``rules/check_then_act.py``)."""

    line: int
    kind: CheckKind
    what: str
    stack: tuple
    locked: bool
    models: frozenset = frozenset()
    #: the entity whose field a limit check compares
    subject: Optional[Entity] = None
    #: ... and that field (``state`` of ``self.state >= T``)
    column: Optional[str] = None
    used: bool = False
    #: for an aggregate: the variables that hold the value (the act must use one)
    names: set = dataclasses.field(default_factory=set)
    #: for a count: the collections whose members it counts (``id.in_(ids)``, ``pk__in=ids``)
    listed: frozenset = frozenset()
    #: the lookup raises when two rows match (``get()`` in ``try``/``except DoesNotExist``,
    #: ``one()``): a duplicate the race makes breaks it from then on
    single_row: bool = False
    #: the names the check's expression reads (None: not known, e.g. a try/except lookup)
    keys: Optional[set] = None
    #: the columns the lookup compared for equality (None: not known)
    lookup: Optional[frozenset] = None
    #: what the lookup's values are made from (``facts.syntax.lookup_values``)
    lookup_values: frozenset = frozenset()
    #: after the ``if`` (or ``try``) that made the check has ended without leaving in one
    #: branch, only an act that uses a name assigned in its branches depends on it
    closed: bool = False
    carried: frozenset = frozenset()
    #: for the rows an update matched: whether the update's values are made from the row's
    #: own columns (``facts.syntax.update_changes_relative``; unknown counts as relative)
    relative: bool = True
    #: inside the branch where the row was found (``if q.exists(): ...``): an insert there is
    #: not the one the check guards
    suspended: bool = False


class ActKind(str, enum.Enum):
    """What a write does to the table."""

    CREATE = "create"          # an insert: the act a missing-row check guards
    SAVE = "save"              # a save of a row read earlier
    UPDATE = "update"          # a queryset or statement update
    DELETE = "delete"          # a delete of a row picked by position (pruning to a limit)


@dataclasses.dataclass(frozen=True)
class Act:
    """A write that may depend on an earlier check."""

    line: int
    what: str                              # how the source spells it, for the message
    kind: ActKind
    model: Optional[str]
    names: frozenset                       # the names the act's expression reads
    #: the columns an insert sets (None: not visible)
    columns: Optional[frozenset]
    entity: Optional[Entity] = None
    #: for an insert: columns seen set and what each value is made from
    #: (``facts.syntax.value_origins``), possibly not all of them (None: none seen)
    values: Optional[Mapping[str, frozenset]] = None
