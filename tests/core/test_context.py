"""Per-request state follows threads, tasks and asgiref hops, and never leaks."""
from __future__ import annotations

import asyncio
import threading

from asgiref.sync import async_to_sync, sync_to_async

import txnsafety
from txnsafety.context import (RequestScope, close_scope, current_scope, current_transaction,
                               enter_lease, held_leases, open_scope)


def test_sync_to_async_and_async_to_sync_hops_keep_the_scope_and_transaction():
    seen = {}

    def sync_part():
        seen["sync"] = (current_scope(), current_transaction())
        async_to_sync(async_inner)()

    async def async_inner():
        seen["inner"] = (current_scope(), current_transaction())

    async def handler():
        with txnsafety.request_scope("hop") as scope, txnsafety.transaction() as txn:
            await sync_to_async(sync_part)()
            return scope, txn

    scope, txn = asyncio.run(handler())
    assert seen["sync"] == (scope, txn)
    assert seen["inner"] == (scope, txn)


def test_concurrent_tasks_have_separate_scopes():
    seen = {}

    async def request(name, gate, other_gate):
        with txnsafety.request_scope(name) as scope:
            gate.set()
            await other_gate.wait()          # both scopes are open at once
            seen[name] = (scope, current_scope())

    async def main():
        a, b = asyncio.Event(), asyncio.Event()
        await asyncio.gather(request("a", a, b), request("b", b, a))

    asyncio.run(main())
    assert seen["a"][0] is seen["a"][1]
    assert seen["b"][0] is seen["b"][1]
    assert seen["a"][0] is not seen["b"][0]


def test_child_task_cannot_pop_the_parents_transaction():
    async def main():
        with txnsafety.transaction() as outer:
            async def child():
                with txnsafety.transaction():
                    pass
            await asyncio.create_task(child())
            return outer, current_transaction()

    outer, after = asyncio.run(main())
    assert after is outer


def test_a_reused_server_thread_starts_each_request_clean():
    """A request that leaks a transaction and a lease leaves nothing for the next."""
    results = []

    class Leaky:
        key, token, fence, verified = "k", "t", 1, True

        def is_live(self):
            return True

    def worker():
        first = RequestScope(name="first")
        open_scope(first)
        txnsafety.context.push_transaction(txnsafety.context.new_transaction())
        enter_lease(Leaky())
        # the server never closes the first request properly; the next one opens
        second = RequestScope(name="second")
        token = open_scope(second)
        results.append((current_scope() is second, current_transaction(), held_leases()))
        close_scope(second, token)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert results == [(True, None, ())]


def test_closing_a_scope_runs_cleanups_last_first_and_survives_a_failing_one(caplog):
    order = []
    scope = RequestScope()
    token = open_scope(scope)
    scope.add_cleanup(lambda: order.append("first"))
    scope.add_cleanup(lambda: 1 / 0)
    scope.add_cleanup(lambda: order.append("last"))
    close_scope(scope, token)
    assert order == ["last", "first"]
    assert "cleanup failed" in caplog.text


def test_nested_transactions_share_their_root():
    with txnsafety.transaction() as outer:
        with txnsafety.transaction() as inner:
            assert inner.root_id == outer.root_id and inner.is_savepoint
    with txnsafety.transaction() as other:
        assert other.root_id != outer.root_id
