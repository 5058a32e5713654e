"""Runtime checker overhead on a database-backed request (generic API, SQLite).

One WSGI request (webob in, JSON out): one transaction, 20 reads and 5 writes
of policy-declared entities through the generic API, commit.  "checked" is the
app behind TxnSafetyMiddleware with the checker on; "unchecked" is the bare app
with the checker off.  They run side by side, alternating, in one process; the
ratio is checked / unchecked.  A second table times the data-layer work alone
(no HTTP), the worst case for the ratio.  Target (DESIGN.md): within 5 %.

    python benchmarks/bench_checker.py [--rounds 300] [--per-round 5] [--wall]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import txnsafety  # noqa: E402
from benchmarks._compare import add_options, compare, start  # noqa: E402
from fixtures.minidb import Entity, Store  # noqa: E402
from webob import Request, Response  # noqa: E402
from txnsafety.wsgi import TxnSafetyMiddleware  # noqa: E402
from txnsafety.context import RequestScope, close_scope, open_scope  # noqa: E402


@txnsafety.written_in_transaction()
@dataclass(eq=False)
class Item(Entity):
    owner: int = 0
    quantity: int = 0
    note: str = ""


def make_app(store: Store):
    def app(environ, start_response):
        request = Request(environ)
        cart = int(request.GET.get("cart", "1"))
        with store.transaction():
            items = [store.get(Item, key) for key in range(1, 21)]
            for item in items[:5]:
                item.quantity += cart
                store.put(item)
        body = {"items": [{"id": i.id, "quantity": i.quantity, "note": i.note} for i in items]}
        return Response(json=body)(environ, start_response)
    return app


def make_wsgi_request(store: Store, checked: bool):
    app = make_app(store)
    wrapped = TxnSafetyMiddleware(app) if checked else app

    def request() -> None:
        txnsafety.settings.enabled = checked
        status, _, body = Request.blank("/cart?cart=1").call_application(wrapped)
        b"".join(body)
        getattr(body, "close", lambda: None)()
        assert status == "200 OK"
    return request


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
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--per-round", type=int, default=5)
    add_options(parser, processes=5)
    args = parser.parse_args()
    start(args)
    txnsafety.configure(mode="log")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(os.path.join(tmp, "bench.sqlite3"))
        store.create(Item)
        store.conn.execute("PRAGMA synchronous=NORMAL")
        with txnsafety.suppress(reason="benchmark data"):
            for key in range(1, 21):
                store.insert(Item(key, owner=key % 3, quantity=0, note="x" * 40))
        request = compare({"unchecked": make_wsgi_request(store, False), "checked": make_wsgi_request(store, True)},
                          baseline="unchecked", rounds=args.rounds, per_round=args.per_round,
                          title="WSGI request: 20 reads + 5 writes in one SQLite transaction (generic API)",
                          fork=False)  # no hooks to switch; one sqlite3 connection, never shared by processes
        print(request.summary("checked") + "\n")
        bare = compare({"unchecked": make_request(store, False), "checked": make_request(store, True)},
                       baseline="unchecked", rounds=args.rounds, per_round=args.per_round,
                       title="data layer alone (no HTTP): 20 reads + 5 writes, the worst case", fork=False)
        print(bare.summary("checked"))
        print(f"checker cost per read/write: {bare.cost_per('checked', 25) * 1e6:.2f} us")
        txnsafety.settings.enabled = True
        store.close()


if __name__ == "__main__":
    main()
