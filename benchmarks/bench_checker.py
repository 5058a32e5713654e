"""Runtime checker overhead on a database-backed request (generic API, SQLite).

One request: open the request scope (as the middleware does), one transaction,
20 reads and 5 writes of policy-declared entities, commit.  Checked and unchecked
run side by side in one process; the ratio is checked / unchecked.
Target (DESIGN.md): within 5 % (ratio <= 1.05).

    python benchmarks/bench_checker.py [--rounds 30]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import txnsafety  # noqa: E402
from benchmarks._compare import compare  # noqa: E402
from fixtures.minidb import Entity, Store  # noqa: E402
from txnsafety.context import RequestScope, close_scope, open_scope  # noqa: E402


@txnsafety.written_in_transaction()
@dataclass(eq=False)
class Item(Entity):
    owner: int = 0
    quantity: int = 0
    note: str = ""


def make_request(store: Store, checked: bool):
    def request() -> None:
        txnsafety.settings.enabled = checked
        scope = RequestScope(name="GET /cart") if checked else None
        token = open_scope(scope) if scope else None
        try:
            with store.transaction():
                items = [store.get(Item, key) for key in range(1, 21)]
                for item in items[:5]:
                    item.quantity += 1
                    store.put(item)
        finally:
            if scope:
                close_scope(scope, token)
    return request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=20)
    args = parser.parse_args()
    txnsafety.configure(mode="log")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(os.path.join(tmp, "bench.sqlite3"))
        store.create(Item)
        store.conn.execute("PRAGMA synchronous=NORMAL")
        with txnsafety.suppress(reason="benchmark data"):
            for key in range(1, 21):
                store.insert(Item(key, owner=key % 3, quantity=0, note="x" * 40))
        medians = compare({"unchecked": make_request(store, False), "checked": make_request(store, True)},
                          baseline="unchecked", rounds=args.rounds, per_round=args.per_round,
                          title="request: 20 reads + 5 writes in one SQLite transaction (generic API)")
        txnsafety.settings.enabled = True
        store.close()
    ratio = medians["checked"] / medians["unchecked"]
    print(f"checker overhead: {100 * (ratio - 1):+.1f} %  (target: within +5 %)")


if __name__ == "__main__":
    main()
