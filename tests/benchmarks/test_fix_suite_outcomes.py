"""``benchmarks/real_suites/fix_suite_outcomes.py``: the pass/fail counts of a suite's output
(pytest's and Django's runner's), and the tests a fixed copy newly fails, on outputs written
by the real runners (a pytest run made here, Django's format as its runner prints it)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "real_suites"))

from fix_suite_outcomes import main, outcome  # noqa: E402

DJANGO_RUN = """\
System check identified no issues (0 silenced).
..E....F.
======================================================================
ERROR: test_login (allauth.socialaccount.providers.openid.tests.OpenIDTests)
----------------------------------------------------------------------
Traceback (most recent call last):
KeyError: 'location'
======================================================================
FAIL: test_signup (allauth.account.tests.AccountTests)
----------------------------------------------------------------------
Ran 9 tests in 1.020s

FAILED (failures=1, errors=1)
"""


def _pytest_output(tmp_path: Path, failing: str) -> str:
    """A real pytest run of three tests, the one named ``failing`` failing."""
    (tmp_path / "test_three.py").write_text(textwrap.dedent(f"""\
        def test_a():
            assert "{failing}" != "a"

        def test_b():
            assert "{failing}" != "b"

        def test_c():
            pass
        """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:txnsafety",
                           "test_three.py"], cwd=tmp_path, capture_output=True, text=True)
    return done.stdout


def test_django_runner_counts_and_failures():
    found = outcome(DJANGO_RUN)
    assert found is not None
    assert found.passed == 7
    assert found.failed == {"allauth.socialaccount.providers.openid.tests.OpenIDTests.test_login",
                            "allauth.account.tests.AccountTests.test_signup"}


def test_pytest_counts_and_a_newly_failing_test(tmp_path, capsys):
    before, after = tmp_path / "before.txt", tmp_path / "after.txt"
    before.write_text(_pytest_output(tmp_path, "a"))
    found = outcome(before.read_text())
    assert found is not None and found.passed == 2 and found.failed == {"test_three.py::test_a"}
    after.write_text(_pytest_output(tmp_path, "a"))
    assert main([str(before), str(after)]) == 0
    after.write_text(_pytest_output(tmp_path, "b"))
    assert main([str(before), str(after)]) == 1
    assert "newly failing: test_three.py::test_b" in capsys.readouterr().out


def test_an_output_with_no_result_line_proves_nothing(tmp_path):
    broken = tmp_path / "broken.txt"
    broken.write_text("ImportError: No module named 'django'\n")
    assert outcome(broken.read_text()) is None
    assert main([str(broken)]) == 1


def test_the_probe_raises_after_each_locked_read_and_only_there(tmp_path):
    from fix_probe import main as probe
    fixed = tmp_path / "models.py"
    fixed.write_text(textwrap.dedent("""\
        def lookup(self):
            with transaction.atomic():
                a = SocialAccount.objects.select_for_update().get(provider=p,
                                              uid=u)
                a.save()
            b = Other.objects.get(pk=1)
        """))
    plain = tmp_path / "plain.py"
    plain.write_text("x = Other.objects.get(pk=1)\n")
    assert probe([str(fixed), str(plain)]) == 0
    assert fixed.read_text().splitlines()[3:6] == [
        "                                      uid=u)",
        '        raise RuntimeError("txnsafety fix probe")',
        "        a.save()"]
    assert fixed.read_text().count("probe") == 1
    assert plain.read_text() == "x = Other.objects.get(pk=1)\n"
    assert probe([str(plain)]) == 1
