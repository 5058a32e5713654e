"""Optimistic writes for ``@versioned`` Django models (the Duolingo post's check-and-set).

Django's ``save()`` is never conditional: it writes the row whatever changed
since it was read.  :func:`versioned_save` writes the instance only if the
version column still holds the value that was read, bumps it, and raises
:class:`VersionConflict` otherwise — a concurrent change makes this write fail
instead of being erased.  The caller re-reads and retries (or tells the user).
"""
from __future__ import annotations

from typing import Any, Iterable

from asgiref.sync import sync_to_async
from django.db import router

from ..policies import policy_of
from . import hooks


class VersionConflict(Exception):
    """The row's version changed since the instance was read: nothing was written."""

    def __init__(self, instance: Any, expected: Any) -> None:
        super().__init__(instance, expected)  # all args: survives pickle and copy
        self.instance = instance
        self.expected = expected

    def __str__(self) -> str:
        return (f"{type(self.instance)._meta.label} pk={self.instance.pk!r} was changed by someone else "
                f"since it was read (expected version {self.expected!r}); re-read it and retry")


def versioned_save(instance: Any, *, field: str | None = None, update_fields: Iterable[str] | None = None,
                   using: str | None = None) -> None:
    """Write ``instance`` if its version column is unchanged in the database, and bump it.

    ``field`` defaults to the model's ``@versioned(field)`` declaration (else
    ``"version"``).  ``update_fields`` limits the columns written, as in ``save()``.
    Sends no ``pre_save``/``post_save`` signals (it is one ``UPDATE ... WHERE
    version = %s``), but fields' ``pre_save`` (``auto_now``) are applied.
    """
    model = type(instance)
    policy = policy_of(model)
    name = field or (policy.versioned_field if policy is not None else None) or "version"
    meta = model._meta
    version_field = meta.get_field(name)
    if instance._state.adding or instance.pk is None:
        raise ValueError("versioned_save() updates a row that was read; create new rows with save()")
    using = using or instance._state.db or router.db_for_write(model, instance=instance)
    fields = [f for f in meta.concrete_fields if not f.primary_key and f is not version_field]
    if update_fields is not None:
        wanted = set(update_fields)
        fields = [f for f in fields if f.name in wanted or f.attname in wanted]
    expected = getattr(instance, version_field.attname)
    new_version = expected + 1
    values = {f.attname: f.pre_save(instance, False) for f in fields}
    values[version_field.attname] = new_version
    hooks.judge_write(instance, using, None if update_fields is None else [f.name for f in fields] + [name],
                      created=False, versioned=True)
    updated = (model._base_manager.using(using)
               .filter(pk=instance.pk, **{version_field.attname: expected})
               .update(**values))
    if not updated:
        raise VersionConflict(instance, expected)
    setattr(instance, version_field.attname, new_version)


async def aversioned_save(instance: Any, *, field: str | None = None,
                          update_fields: Iterable[str] | None = None, using: str | None = None) -> None:
    """Async :func:`versioned_save`."""
    await sync_to_async(versioned_save)(instance, field=field, update_fields=update_fields, using=using)
