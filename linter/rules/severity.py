"""Severity: how likely a race is and what it costs, so the worth-fixing findings come first.

Confidence says how sure the analysis is that a write can be lost; severity says whether a
maintainer would fix it this week.  Two facts decide it, both read from what the source shows:

* **contention**: a row keyed by the request's own user or session (their profile, their
  cart, ``Cart.objects.get(user=request.user)``, ``current_user``) is *owned*: racing it needs
  one person submitting twice at once.  Any other row (a product's stock, a voucher, an event,
  a team, a job row workers claim) is *shared*.
* **harm**: counters, amounts, balances, stock, quotas and limits, one-time tokens, rate
  limits and state transitions are *high*; labels, timestamps, caches and statistics (a view
  count off by one) are *low*; anything else is *medium*.

``HIGH`` = shared and high harm; ``LOW`` = a statistic, an owned row whose loss is not high
harm, or a get-or-create on an owned key; ``MEDIUM`` otherwise.  A get-or-create whose lookup
expects one row (``get()`` in ``try``/``except DoesNotExist``) is ``MEDIUM`` even on an owned
key: the duplicate one double submit makes breaks that ``get()`` for good
(``MultipleObjectsReturned``), which is why projects fix it (allauth's ``add_email``).

Owned is read from the row's model and from how it is found: a user model (``User``,
``Profile``, ``UserSettings``) is its user's own whatever key reads it; a lookup comparing a
user column (``filter(user=user)``, ``filter(id=chat_id, user_id=user_id)``) finds a row of one
user; and a configuration row (a model named ``...Config``, ``...Settings``,
``...Configuration``) is written by the few people who administer it, one screen at a time.
Each of those needs one person (or one administrator) acting twice at once, the coincidence
fresh projects' judges called weak, unless what is lost is high harm.  (The issue's first rule made
an owned row's medium-harm field and a shared statistic ``MEDIUM``; on fresh projects the
judges called most of those weak, races nobody would fix soon.)  A stomp inside one
request (TXN103) needs no second request: it loses the write every time, so it is ``HIGH``.
Names decide harm, so a field the project names unusually can be misjudged: the reason
printed with the finding says which name decided (CodeQL's ``@problem.severity`` and
bandit's severity beside confidence are the models).
A finding's label (true or false) never depends on its severity; severity only orders and,
by default, hides the ``low`` ones (``--min-severity low`` shows them).
"""
from __future__ import annotations

import re
from typing import Iterable, Optional

from ..facts.model import Act, Assessment, Check, CheckKind, Entity, Mutation, Severity

#: how a read or a check names the request's own user or session
_OWNER = re.compile(r"\b(?:request\.user|current_user|g\.user|request\.session|user_id|owner_id|"
                    r"owner|author|created_by|user|session_key|get_current_user)\b")
#: names of rows that are the user's own (``request.user``, ``current_user``, ``self.user``)
_OWNED_NAMES = re.compile(r"^(?:request\.user|current_user|g\.user|self\.request\.user)$")
#: models that are a user's own row when read as ``self`` or by the user's key
_USER_MODELS = re.compile(r"(?:^|[a-z])(?:User|Profile|Preferences?|UserSettings|Account)$")
#: ... and those that are, however they are read (an account may be another's payee: not here)
_ALWAYS_OWNED = re.compile(r"(?:^|[a-z])(?:User|Profile|Preferences?|UserSettings)$")
#: a lookup column naming the user a row belongs to (not ``account``: in many projects an
#: account is an organisation its members share, as ``_ALWAYS_OWNED`` leaves ``Account`` out)
_OWNER_COLUMN = re.compile(r"^(?:user|user_id|owner|owner_id|author|author_id|created_by|"
                           r"created_by_id)$")
#: configuration rows: written by the people who administer them, rarely twice at once
_CONFIG_MODELS = re.compile(r"(?:Config|Configuration|Settings|Preferences)(?:Model|Entity)?$")

#: fields whose loss costs: counters, money, stock, limits, tokens, state
_HIGH_HARM = re.compile(
    r"(?:^|_)(?:balance|amount|credits?|points|stock|quantity|qty|inventory|quota|limits?|remaining|"
    r"uses|used|usage|attempts|failures|failed|tries|retries|seats|slots|capacity|reserved|sold|"
    r"price|funds|tokens?|otp|nonce|last_t|counter|sequence|status|state|locked|claimed|"
    r"assigned|allocated|redeemed|consumed|paid|approved|verified|confirmed)(?:_|$)")
#: statistics: a count shown to people, off by one costs nothing
_STATISTIC = re.compile(
    r"(?:^|_)(?:views?|visits?|hits?|clicks?|impressions?|downloads?|reads?|likes|votes|"
    r"recommendations|popularity|rank|score)(?:_|$)|(?:^|_)(?:view|visit|hit|click|post|topic|"
    r"reply|replies|comment|like|vote|follower|member|message|download|read)s?_count$")
#: fields whose loss costs little: labels, timestamps, caches
_LOW_HARM = re.compile(
    r"(?:^|_)(?:name|title|label|description|desc|text|note|notes|comment|bio|slug|tags?|color|"
    r"icon|avatar|image|theme|language|lang|timezone|at|on|time|date|timestamp|modified|updated|"
    r"changed|seen|visited|accessed|login|last|cache|cached)(?:_|$)")


def _attr_harm(attr: str) -> str:
    lower = attr.lower()
    if _STATISTIC.search(lower):
        return "statistic"
    if _HIGH_HARM.search(lower):
        return "high"
    return "low" if _LOW_HARM.search(lower) else "medium"


def _owned_entity(ent: Optional[Entity]) -> Optional[str]:
    """Why ``ent`` is a row of the request's own user, or None when it is shared."""
    if ent is None:
        return None
    if _OWNED_NAMES.match(ent.name):
        return f"`{ent.name}` is the request's own user"
    key = ent.key or ""
    if ent.source in ("get", "loop", "call") and _OWNER.search(key):
        return f"`{ent.name}` is read by its user"
    if ent.model and (_ALWAYS_OWNED.search(ent.model) or ent.source == "self" and _USER_MODELS.search(ent.model)):
        return f"`{ent.model}` is a user's own row"
    if ent.lookup and any(_OWNER_COLUMN.match(c) for c in ent.lookup):
        return f"`{ent.name}` is found by its user"
    return _configuration(ent.model)


def _configuration(model: Optional[str]) -> Optional[str]:
    if model and _CONFIG_MODELS.search(model):
        return f"`{model}` is configuration its administrators write"
    return None


def _field_harm(attrs: Iterable[str], counter: bool) -> tuple[str, str]:
    """(``high``/``medium``/``low``, why) for a write of ``attrs``; ``counter``: one of them is
    incremented in Python (TXN106): a counter is high harm unless it is a statistic."""
    harms = {attr: _attr_harm(attr) for attr in dict.fromkeys(attrs)}
    high = [a for a, h in harms.items() if h == "high"]
    if high:
        return "high", f"`{high[0]}` is a counter, amount, limit, token or state"
    if harms and all(h == "statistic" for h in harms.values()):
        return "statistic", f"`{next(iter(harms))}` is a statistic"
    if harms and all(h in ("low", "statistic") for h in harms.values()):
        first = next(iter(harms))
        kind = "a statistic" if harms[first] == "statistic" else "a label, timestamp or cache"
        return "low", f"`{first}` is {kind}"
    if counter:
        return "high", "a counter"
    return "medium", ""


def _combine(owned: Optional[str], shared_why: str, harm: str, harm_why: str) -> Assessment:
    contention = f"owned: {owned}" if owned else f"shared: {shared_why}"
    reason = contention + (f"; {harm} harm: {harm_why}" if harm_why else "")
    if not owned and harm == "high":
        return Assessment(Severity.HIGH, reason)
    if harm == "statistic" or (owned and harm != "high"):
        # a displayed count off by one costs nothing whoever races it; an owned row needs
        # its one user to submit twice at once, worth fixing first only when it costs
        return Assessment(Severity.LOW, reason)
    return Assessment(Severity.MEDIUM, reason)


def _shared_why(model: Optional[str], by: str = "") -> str:
    what = f"`{model}`" if model else "the row"
    return f"other requests write {what}{by}"


def of_write(ent: Entity, changes: Iterable[Mutation]) -> Assessment:
    """A read-modify-write (TXN101, 102, 104, 106, 109) of ``ent`` carrying ``changes``."""
    changes = list(changes)
    harm, why = _field_harm((m.attr for m in changes), any(m.kind == "counter" for m in changes))
    return _combine(_owned_entity(ent), _shared_why(ent.model), harm, why)


def _check_owned(check: Check, model: Optional[str]) -> Optional[str]:
    if check.subject is not None:
        owned = _owned_entity(check.subject)
        if owned:
            return owned
    elif check.keys and any(_OWNER.search(k) for k in check.keys) or _OWNER.search(check.what or ""):
        return "the check is keyed by the request's own user"
    if check.lookup and any(_OWNER_COLUMN.match(c) for c in check.lookup):
        return "the lookup is keyed by a user"
    return _configuration(model)


def of_check(check: Check, act: Optional[Act], stored: Iterable[str] = ()) -> Assessment:
    """A check-then-act (TXN105): a limit or a count is high harm (a limit exceeded, a number
    given twice); a duplicate row is medium; on an owned key it is low (one user's double
    submit makes their own duplicate).  An aggregate stored into a statistic (a forum's
    ``topic_count`` recounted) is a statistic: ``stored`` names the columns it went to."""
    model = (act.model if act is not None else None) or (min(check.models) if check.models else None)
    owned = _check_owned(check, model)
    if check.kind in (CheckKind.COUNT, CheckKind.LIMIT):
        return _combine(owned, _shared_why(model), "high", "a count or limit checked")
    if check.kind is CheckKind.AGGREGATE:
        stored = tuple(stored) or (tuple(sorted(act.columns)) if act is not None and act.columns else ())
        harm, why = _field_harm(stored, False) if stored else ("", "")
        if harm != "statistic":
            harm, why = "high", "a number computed from the table"
        return _combine(owned, _shared_why(model), harm, why)
    if owned and check.single_row:
        # ``get()`` then ``create()`` on the DoesNotExist branch: one double submit leaves two
        # rows, and every later ``get()`` of them raises MultipleObjectsReturned
        return Assessment(Severity.MEDIUM, f"owned: {owned}; medium harm: a duplicate makes the "
                                           f"lookup raise from then on (it expects one row)")
    if owned:
        what = "configuration" if "configuration" in owned else "the user's own key"
        return Assessment(Severity.LOW, f"owned: {owned}; a get-or-create on {what}")
    return _combine(None, _shared_why(model), "medium", "a duplicate row")


def of_claim(ent: Optional[Entity], columns: Iterable[str]) -> Assessment:
    """A compare-and-set or a use-then-delete (TXN105): work done twice by two claimants."""
    harm, why = _field_harm(columns, False)
    if harm != "low":
        harm, why = "high", "the claim makes work single (a state transition)"
    return _combine(_owned_entity(ent), _shared_why(ent.model if ent else None), harm, why)


def internal() -> Assessment:
    """TXN103: one request's own two copies; no second request needed."""
    return Assessment(Severity.HIGH, "every call loses the first write: no second request needed")


def plain(reason: str) -> Assessment:
    """Codes whose severity no field decides (TXN107 side effects, TXN108 locks)."""
    return Assessment(Severity.MEDIUM, reason)
