"""txnsafety.limits: is the value a call returns compared with a limit?  The caller's
bytecode decides it (an ordering comparison, through a local, an ``await`` or a helper
that returns it); a count shown, asserted with ``==`` or tested against 0 or 1 is not."""
from __future__ import annotations

import asyncio
import sys

from txnsafety.limits import compared_with_limit


class Counter:
    def __init__(self, value: int = 1) -> None:
        self.value = value
        self.verdicts: list[bool] = []

    def count(self) -> int:
        self.verdicts.append(compared_with_limit(sys._getframe(1)))
        return self.value

    async def acount(self) -> int:
        self.verdicts.append(compared_with_limit(sys._getframe(1)))
        return self.value


class Event:
    capacity = 3


def _limit_inline(q, e):
    return q.count() < e.capacity


def _limit_through_a_local(q, e):
    n = q.count()
    print("counted")
    if n >= e.capacity:
        raise ValueError
    return n


def _helper(q):
    return q.count()


def _limit_through_a_helper(q, e):
    return _helper(q) < e.capacity


def _shown(q):
    return f"{q.count()} taken"


def _asserted(q):
    assert q.count() == 1


def _argument(q):
    return max(q.count(), 2)


def _existence(q):
    return q.count() > 0


def _local_shown(q):
    n = q.count()
    return [n, n]


def test_a_count_compared_with_a_limit_is_told():
    for caller in (_limit_inline, _limit_through_a_local, _limit_through_a_helper):
        q = Counter()
        caller(q, Event())
        assert q.verdicts == [True], caller.__name__


def test_a_count_shown_asserted_passed_on_or_tested_for_rows_is_not():
    for caller in (_shown, _asserted, _argument, _existence, _local_shown):
        q = Counter()
        caller(q)
        assert q.verdicts == [False], caller.__name__


def test_an_awaited_count_is_followed_past_the_await():
    async def inline(q):
        return await q.acount() < Event.capacity

    async def local(q):
        n = await q.acount()
        if n >= Event.capacity:
            return None
        return n

    async def shown(q):
        return f"{await q.acount()}"

    q = Counter()
    for fn in (inline, local, shown):
        asyncio.run(fn(q))
    assert q.verdicts == [True, True, False]


def test_no_frame_is_no_limit():
    assert compared_with_limit(None) is False


def test_a_count_of_none_is_tested_when_it_decides_a_branch():
    from txnsafety.limits import tested

    class Zero(Counter):
        def count(self) -> int:
            self.verdicts.append(tested(sys._getframe(1)))
            return 0

    def branch(q):
        if not q.count():
            return 1
        return 2

    def compared(q):
        return q.count() == 0

    def asserted(q):
        assert q.count() == 0

    def shown(q):
        return f"{q.count()}"

    def passed_on(q):
        return max(q.count() == 0, 0)

    q = Zero()
    for fn in (branch, compared, asserted, shown, passed_on):
        fn(q)
    assert q.verdicts == [True, True, False, False, False]
