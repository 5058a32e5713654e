"""The Django scenarios as production runs the checker: ``read_sites="adaptive"``, no
model's sites wanted yet (tests/_production_mode.py), so the statement reads share their
stamps and no read is located (txnsafety/django/reads.py).

The rest of the suite runs under the pytest plugin's ``read_sites="always"``.  Here each
scenario must be reported with exactly its codes, and the concurrent counter must lose
its updates and have every request reported: what production reports, not the sites only
the debugging mode finds (docs/production-mode.md).
"""
from __future__ import annotations

import threading

import pytest

from fixtures.django_app.models import Counter
from fixtures.http_servers import concurrently, get_json
from tests._production_mode import production_read_sites

from .conftest import assert_each_request_reported
from .test_concurrency import N, VARIANTS, server_url  # noqa: F401  (server_url: the fixture)
from .test_scenarios import EXPECTED


@pytest.fixture(autouse=True)
def production():
    with production_read_sites():
        yield


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario_through_a_request_in_production(db, client, scenario, txnsafety_violations):
    response = client.get(f"/{db}/account/{scenario}/1/")
    assert response.status_code == 200, response.content
    assert txnsafety_violations.codes() == EXPECTED[scenario][db]
    for violation in txnsafety_violations:
        assert violation.model == "django_app.Account"
        assert violation.write_site is not None and violation.request_id
    if txnsafety_violations and txnsafety_violations[0].code.value != "TXN108":
        assert txnsafety_violations[0].read_site is None  # production's path judged it: no site yet


@pytest.mark.parametrize("variant", ["racy", "racy_atomic", "for_update", "user_lock"])
def test_counter_under_concurrent_requests_in_production(variant, pg_db, server_url, interleave,  # noqa: F811
                                                         txnsafety_violations):
    alias, point, expected_lost, code = VARIANTS[variant]
    barrier = threading.Barrier(N, timeout=30)   # the timeout only turns a bug into a failure, not a hang
    interleave["fn"] = lambda at: barrier.wait() if at == point else None

    results = concurrently(N, lambda i: get_json(f"{server_url}/{alias}/counter/{variant}/1/"))

    assert [status for status, _ in results] == [200] * N, results
    assert N - Counter.objects.using("pg").get(pk=1).value == expected_lost
    assert_each_request_reported(txnsafety_violations, code, N, variant)
    if code is not None:
        assert {v.read_site for v in txnsafety_violations} == {None}  # all read before the first report
