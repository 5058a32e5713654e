"""The cheap first stage: which modules and functions are worth a libcst parse.

flake8 runs every plugin on every file and a libcst parse with positions costs about ten
times an ``ast`` parse, so text tests on the module and then on each function's source pick
the few percent of a codebase that holds both an entity read and a write (or a
``select_for_update``, or a side effect in a transaction).
"""
from __future__ import annotations

import re


from .config import Config


_GET_TOKENS = (r"objects|session|query|select_for_update|with_for_update|_or_404|\.key\b|Key\("
               r"|\.get_\w+\(|get_or_insert|fetch_under_lock|\bdb\.get\(|\bndb\b|scalar|\.get\(")
_WRITE_TOKENS = (r"\.a?save\(|\.put\(|put_multi|\.commit\(|\.flush\(|\.a?create\(|\.a?update\(|\.add(?:_all)?\("
                 r"|bulk_create|\bbegin\(|\.put_async\(|_or_create\(")
_TXN_TOKENS = r"atomic|transaction|begin\(|lock\("
# tighter, for picking functions inside a module that passed the module-level test
_F_GET_TOKENS = (r"objects|session|query|select_for_update|with_for_update|_or_404|key\.get\(|Key\("
                 r"|\b[A-Z]\w*\.get_\w+\(|get_or_insert|fetch_under_lock|\bdb\.get\(|scalar"
                 r"|self\.get_object\(|get_queryset\(|self\.(?:get|filter|first)\(")
_F_WRITE_TOKENS = (r"\.a?save\(|\.put\(|put_multi|\.commit\(|\.flush\(|\.a?create\(|\)\.a?update\(|\)\.a?delete\("
                   r"|objects\.update\(|session\.add|\.add_all\(|bulk_create|\.put_async\("
                   r"|execute\(\s*(?:insert|update)\(|\.begin\(|begin_nested\(|\.a?(?:get|update)_or_create\(")


_RECEIVER = re.compile(r"\.connect\(|@receiver\(")
_SELF_RMW = re.compile(r"self\.\w+\s*[-+]=|self\.(\w+)\s*=\s*self\.\1\b|self\.\w+\.(?:append|extend)\(")
_SELF_WRITE = re.compile(r"self\.a?(?:save|put)\(|session\.commit\(")


#: a lookup that may miss (its exception caught), then a store through a method
_MISSING_THEN_STORE = re.compile(r"except [\w.]*(?:NotFound|DoesNotExist)\b")
_AGGREGATE = re.compile(r"aggregate\(|func\.max\(|\bMax\(")
_SELF_SET = re.compile(r"self\.\w+\s*=[^=]")
#: ``x = Model(...)`` then ``x.save()``: a function that inserts a row
_NEW_ROW_SAVED = re.compile(r"(\b\w+) = (?:\w+\.)?[A-Z]\w*\([^\n]*\n(?:.*\n)*?\s*\1\.a?(?:save|create)\(")
_TEST = re.compile(r"^\s*(?:el)?if\b", re.M)
_STORE_METHOD = re.compile(r"\.(?:save|store|persist|insert|create|add)_\w+\(")
#: ``x.delete()`` of a row, after ``x.team.members.add(u)`` or ``mail.send()`` (a signal's
#: ``send(sender, ...)`` is no message out)
_CONSUMED = re.compile(r"\b\w+\.a?delete\(\)")
_USED = re.compile(r"\b\w+\.\w+\.\w+\.(?:add|remove|set|clear)\(|\.send\((?:\)|(?!sender=)\w+=)"
                   r"|\bsend_(?:mail|mass_mail|messages|email|sms)\("
                   r"|\.deliver\(|\.delay\(|\.apply_async\(|\bpublish\(|\brequests\.\w+\(")
_STORE_CALL = re.compile(r"\.(?:save|store|persist|insert|create|add)(?:_\w+)?\(")


class Prefilter:
    def __init__(self, vocab_cfg: Config):
        extra_g = "|".join(re.escape(n.split(".")[-1]) for n in sorted(vocab_cfg.gets))
        extra_p = "|".join(re.escape(n.split(".")[-1]) + r"\(" for n in sorted(vocab_cfg.puts))
        self.gets = re.compile(_GET_TOKENS + ("|" + extra_g if extra_g else ""))
        self.writes = re.compile(_WRITE_TOKENS + ("|" + extra_p if extra_p else ""))
        self.txn = re.compile(_TXN_TOKENS + "".join(
            "|" + re.escape(n.split(".")[-1]) for n in sorted(vocab_cfg.transactions
                                                              | vocab_cfg.retrying_transactions
                                                              | vocab_cfg.locks)))
        self.mut = re.compile(r"(?<!self)(?<!cls)\.\w+(?:\[[^\]\n]*\])?\s*(?:[-+*/|&]?=(?!=)|\.(?:append|extend|update|"
                              r"pop|remove|insert|setdefault|clear)\()|setattr\(|self\.a?(?:save|put)\(")
        self.f_gets = re.compile(_F_GET_TOKENS + ("|" + extra_g if extra_g else ""))
        self.f_writes = re.compile(_F_WRITE_TOKENS + ("|" + extra_p if extra_p else ""))
        side = vocab_cfg.side_effects | {"send_mail", "mail_admins", "delay", "apply_async",
                                         "taskqueue", "defer", "requests", "httpx", "urlopen",
                                         "cache", "memcache", "send_email", "enqueue", "publish"}
        self.side = re.compile("|".join(re.escape(n.split(".")[-1]) for n in sorted(side)))
        # a check, or a query selecting rows by state (a claim: ``rules/claim.py``)
        self.check = re.compile(r"exists\(|count\(|aggregate\(|func\.max\(|DoesNotExist|NoResultFound| is None|if not "
                                r"|rowcount|==\s*0\b"
                                r"|(?:if|while) [^\n]*[<>]|__(?:lte?|gte?|isnull)=|\.(?:is_|isnot|is_not|notin_)\(")

    def module_relevant(self, text: str) -> bool:
        if "select_for_update" in text or _MISSING_THEN_STORE.search(text):
            return True
        if _SELF_RMW.search(text) and _SELF_WRITE.search(text):
            return True             # a model method: ``self.n += 1; self.save()``
        if _RECEIVER.search(text) and self.mut.search(text) and self.writes.search(text):
            return True             # a signal receiver writing the rows it is handed
        if self.gets.search(text) and self.writes.search(text):
            return True
        return bool(self.txn.search(text))

    def stores_through_method(self, text: str) -> bool:
        """A module that calls a loader helper (checked by the caller) may act on its answer
        through a method (``repo.create_from(project)``): worth analysing then."""
        return bool(_STORE_METHOD.search(text) and _TEST.search(text))

    def acts_on_answer(self, text: str) -> bool:
        """A caller of a loader helper that tests something and inserts, or stores a row
        through a method (``if not project: repo.create_from(project)``): the check may live
        in the helper (``flow/presence.py``)."""
        return bool((self.f_writes.search(text) or _STORE_METHOD.search(text)) and _TEST.search(text))

    def function_relevant(self, text: str) -> bool:
        if "select_for_update" in text or "with_for_update" in text:
            return True
        if _CONSUMED.search(text) and _USED.search(text):
            return True             # a row used, then deleted (rules/consume.py)
        if _MISSING_THEN_STORE.search(text) and _STORE_CALL.search(text):
            return True             # ``except ZoneNotFound:`` then ``self.create_zone(...)``
        if _AGGREGATE.search(text) and _SELF_SET.search(text):
            return True             # a number computed for the row a model method prepares
        if ("save(" in text or "create(" in text) and _NEW_ROW_SAVED.search(text):
            return True             # an insert helper: its callers' checks may guard it
        if "_or_create(" in text and "objects" in text:
            return True             # a get-or-create in one call (rules/unkeyed_get_or_create.py)
        has_write = self.f_writes.search(text) is not None
        if not has_write:
            if self.txn.search(text) is not None and self.f_gets.search(text) and self.mut.search(text):
                return True         # read and changed under a unit of work that commits it
            return self.txn.search(text) is not None and self.side.search(text) is not None
        if self.f_gets.search(text) and (self.mut.search(text) or self.check.search(text)):
            return True
        if self.mut.search(text) and re.search(r"\.(a?save|put|put_async)\(|put_multi|commit\(|flush\(",
                                               text):
            return True
        return self.txn.search(text) is not None and self.side.search(text) is not None
