"""Reports reaching the tools users watch: the log record, and the recipes of
docs/observability.md run as they stand against the real sentry-sdk (a transport that
captures envelopes), the OpenTelemetry SDK (in-memory exporters) and prometheus_client.

Each recipe runs in a fresh interpreter (these SDKs install process-wide hooks), with an
application whose data layer is a library module, so sites are the application's lines.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import txnsafety
from txnsafety.report import log_violation

from .conftest import Account

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "observability.md"

MODELS = '''
import txnsafety

__txnsafety_library__ = True  # a data layer: report its callers' lines

@txnsafety.written_in_transaction()
class Row:
    def __init__(self, pk):
        self.pk = pk

@txnsafety.never_written()
class Country:
    def __init__(self, pk):
        self.pk = pk

def read(model, pk):
    row = model(pk)
    txnsafety.record_read(row, key=pk)
    return row

def write(row):
    txnsafety.record_write(row, key=row.pk)
'''

APP = '''
import txnsafety
from models import Country, Row, read, write

def pay(pk):
    with txnsafety.request_scope("POST /pay"):
        row = read(Row, pk)
        write(row)

def rename(pk):
    with txnsafety.request_scope("POST /country"):
        write(read(Country, pk))
'''
PAY_LINE = 8  # `write(row)` in APP


def recipe(name: str) -> str:
    blocks = re.findall(r"```python\n(# recipe: (\w+)\n.*?)```", DOC.read_text(), re.S)
    found = {tag: code for code, tag in blocks}
    assert name in found, f"no '# recipe: {name}' block in {DOC}"
    return found[name]


def run(tmp_path: Path, script: str) -> dict:
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "script.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TXNSAFETY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the record ------------------------------------------------------------------------------------

def _stomp_here(store):
    acct = store.get(Account, 1)
    store.put(acct)  # the write site of the record below


@pytest.mark.txnsafety_allow("asserts the log record")
def test_one_record_per_report_with_template_level_and_the_users_write_site(store, caplog):
    previous = txnsafety.settings.log_level
    txnsafety.configure(mode="log")
    try:
        with caplog.at_level(logging.DEBUG, "txnsafety"):
            with txnsafety.request_scope("r1"):
                _stomp_here(store)
                _stomp_here(store)  # same sites, same request: deduplicated
            txnsafety.configure(log_level="ERROR")
            with txnsafety.request_scope("r2"):
                _stomp_here(store)
    finally:
        txnsafety.configure(mode="raise")
        txnsafety.settings.log_level = previous
    records = [r for r in caplog.records if r.name == "txnsafety" and hasattr(r, "txnsafety")]
    assert [r.levelno for r in records] == [logging.WARNING, logging.ERROR]
    for record in records:
        assert record.msg == "TXN102 unprotected: %s"
        assert record.getMessage().startswith("TXN102 unprotected: read, modified and written")
        assert record.pathname == __file__ and record.funcName == "_stomp_here"
        assert record.lineno == _stomp_here.__code__.co_firstlineno + 2
        assert record.txnsafety["code"] == "TXN102" and record.txnsafety["model"].endswith("Account")


def test_the_formatted_record_is_the_report_and_a_level_can_be_forced():
    from txnsafety.codes import Code
    from txnsafety.report import Violation
    from txnsafety.sites import Site
    violation = Violation(Code("TXN103"), "100% the same row", "shop.Account", "1",
                          write_site=Site("/srv/app/views.py", 12, "pay"))
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)

    handler = Keep()
    logging.getLogger("txnsafety").addHandler(handler)
    try:
        log_violation(violation, level=logging.CRITICAL)
    finally:
        logging.getLogger("txnsafety").removeHandler(handler)
    (record,) = seen
    assert record.getMessage() == str(violation)
    assert record.msg.startswith("TXN103 ") and record.msg.endswith(": %s")
    assert (record.pathname, record.lineno, record.funcName) == ("/srv/app/views.py", 12, "pay")


@pytest.mark.parametrize("bad", ["LOUD", -1, True, None.__class__])
def test_a_bad_log_level_is_a_configuration_error(bad):
    with pytest.raises(ValueError, match="log_level must be a logging level"):
        txnsafety.configure(log_level=bad)


# -- Sentry ----------------------------------------------------------------------------------------

SENTRY = '''
import functools, json
import sentry_sdk
from sentry_sdk.transport import Transport

EVENTS = []

class Capture(Transport):
    def capture_envelope(self, envelope):
        for item in envelope.items:
            if item.type == "event":
                EVENTS.append(item.payload.json)

SENTRY_DSN = "https://public@sentry.invalid/1"
sentry_sdk.init = functools.partial(sentry_sdk.init, transport=Capture)  # the test's transport
RECIPE
import txnsafety, app
app.pay(1)
app.pay(1)          # another request, same sites: the same issue again
app.rename(2)
errors = len(EVENTS)
txnsafety.configure(log_level="WARNING")
app.pay(3)          # a breadcrumb now, not an event
sentry_sdk.capture_message("the request failed")
sentry_sdk.flush()
print(json.dumps({"events": EVENTS, "errors": errors}))
'''


def test_sentry_recipe_one_issue_per_code_and_model_breadcrumbs_at_warning(tmp_path):
    out = run(tmp_path, SENTRY.replace("RECIPE", recipe("sentry")))
    events = out["events"]
    assert out["errors"] == 3 and len(events) == 4
    pay1, pay2, rename, message = events
    assert pay1["logentry"]["message"] == pay2["logentry"]["message"] == "TXN102 unprotected: %s"
    assert rename["logentry"]["message"].startswith("TXN110 ")
    assert pay1["fingerprint"] == pay2["fingerprint"] == ["txnsafety", "TXN102", "models.Row"]
    assert rename["fingerprint"] == ["txnsafety", "TXN110", "models.Country"]
    assert pay1["level"] == "error" and pay1["logger"] == "txnsafety"
    assert pay1["extra"]["txnsafety"]["write_site"].endswith(f"app.py:{PAY_LINE} in pay")
    crumbs = [c for c in message["breadcrumbs"]["values"] if c.get("category") == "txnsafety"]
    assert [c["level"] for c in crumbs][-1] == "warning"
    assert crumbs[-1]["message"].startswith("TXN102 unprotected:")
    assert "fingerprint" not in message


# -- OpenTelemetry ---------------------------------------------------------------------------------

OTEL = '''
import json
from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

spans, logs, reader = InMemorySpanExporter(), InMemoryLogExporter(), InMemoryMetricReader()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(tracer_provider)
logger_provider = LoggerProvider()
logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
_logs.set_logger_provider(logger_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
RECIPE
import app
with trace.get_tracer("test").start_as_current_span("POST /pay"):
    app.pay(1)
app.rename(2)
points = [(dict(p.attributes), p.value)
          for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
          for m in sm.metrics if m.name == "txnsafety.violations" for p in m.data.data_points]
(span,) = spans.get_finished_spans()
records = [l.log_record for l in logs.get_finished_logs()]
print(json.dumps({
    "span": span.name, "events": [(e.name, dict(e.attributes)) for e in span.events],
    "points": sorted(points, key=str),
    "logs": [(r.severity_text, str(r.body), dict(r.attributes)) for r in records],
}))
'''


def test_opentelemetry_recipe_span_events_counter_and_logs(tmp_path):
    out = run(tmp_path, OTEL.replace("RECIPE", recipe("opentelemetry")))
    assert out["span"] == "POST /pay"
    ((name, attributes),) = out["events"]
    assert name == "txnsafety.violation"
    assert attributes["txnsafety.code"] == "TXN102" and attributes["txnsafety.model"] == "models.Row"
    assert attributes["code.file.path"] == str(tmp_path / "app.py") and attributes["code.line.number"] == PAY_LINE
    assert out["points"] == [[{"code": "TXN102", "model": "models.Row"}, 1],
                             [{"code": "TXN110", "model": "models.Country"}, 1]]
    severities = [severity for severity, _, _ in out["logs"]]
    assert severities == ["WARN", "WARN"] or severities == ["WARNING", "WARNING"]
    body, log_attributes = out["logs"][0][1:]
    assert body.startswith("TXN102 unprotected: read, modified and written")
    # semantic conventions 1.30 (code.file.path) or older (code.filepath), as the SDK installed has it
    get = lambda new, old: log_attributes.get(new, log_attributes.get(old))  # noqa: E731
    assert get("code.file.path", "code.filepath") == str(tmp_path / "app.py")
    assert get("code.line.number", "code.lineno") == PAY_LINE and get("code.function.name", "code.function") == "pay"


# -- Prometheus ------------------------------------------------------------------------------------

PROMETHEUS = '''
import json
from prometheus_client import REGISTRY
RECIPE
import app
from txnsafety.locks import user_write_lock
app.pay(1)
app.pay(1)
app.rename(2)
with user_write_lock("user-7"):
    pass
value = lambda name, **labels: REGISTRY.get_sample_value(name, labels)
print(json.dumps({
    "pay": value("txnsafety_violations_total", code="TXN102", model="models.Row"),
    "rename": value("txnsafety_violations_total", code="TXN110", model="models.Country"),
    "acquired": value("txnsafety_lock_events_total", event="acquired"),
    "released": value("txnsafety_lock_events_total", event="released"),
    "waits": value("txnsafety_lock_wait_seconds_count"),
}))
'''


def test_prometheus_recipe_counts_reports_and_lock_events(tmp_path):
    out = run(tmp_path, PROMETHEUS.replace("RECIPE", recipe("prometheus")))
    assert out == {"pay": 2.0, "rename": 1.0, "acquired": 1.0, "released": 1.0, "waits": 1.0}


def test_every_recipe_in_the_doc_is_tested():
    tags = re.findall(r"# recipe: (\w+)", DOC.read_text())
    source = Path(__file__).read_text()
    assert tags and all(f'recipe("{tag}")' in source for tag in tags), tags


def test_the_recipe_blocks_are_plain_python():
    for tag in re.findall(r"# recipe: (\w+)", DOC.read_text()):
        compile(textwrap.dedent(recipe(tag)), f"{DOC}:{tag}", "exec")
