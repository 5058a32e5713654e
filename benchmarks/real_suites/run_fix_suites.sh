#!/usr/bin/env bash
# `txnsafety lint --fix` on real releases of the bug corpus (benchmarks/corpus/bugs/), proved by
# each project's own test suite: the suite on the release as published, then on a copy fixed by
# `--fix` (safe fixes), then on a copy fixed by `--fix --unsafe-fixes`.  Nothing that passed may
# fail.  Usage:
#
#   bash benchmarks/real_suites/run_fix_suites.sh WORK [django-axes] [django-allauth] [edx-submissions]
#
# Every finding is shown (--min-severity low --min-confidence low), so every fix is applied.
# WORK keeps the virtualenvs, sources and results: WORK/<project>-{safe,unsafe}.diff (what the
# fix changed), WORK/<project>-{safe,unsafe}-lint.txt (what it fixed, what remains and why),
# WORK/<project>-{before,safe,unsafe}.txt (the suite's output).  A mode whose fix changed
# nothing is not run again (same code as before).  Old releases want old Pythons: PY36 and
# PY38 name them (default: pyenv's 3.6 and 3.8).  edx-submissions publishes its tests only in
# git: EDX_SUBMISSIONS_GIT is a clone of openedx/edx-submissions (cloned when unset).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
WORK="${1:?usage: run_fix_suites.sh WORK [project...]}"
shift
PROJECTS=("${@:-django-axes django-allauth edx-submissions}")
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
PYENV_ROOT="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
PY36="${PY36:-$PYENV_ROOT/versions/3.6.15/bin/python}"
PY38="${PY38:-$PYENV_ROOT/versions/3.8.18/bin/python}"
LINT_ARGS=(--min-severity low --min-confidence low)
STATUS=0

lint_venv() {  # the linter of this checkout, in a venv of its own
    local venv="$WORK/lint-venv"
    [ -x "$venv/bin/txnsafety" ] || {
        python3 -m venv --system-site-packages "$venv"
        "$venv/bin/pip" install -q libcst >&2
        "$venv/bin/pip" install -q --no-deps -e "$REPO" >&2
    }
    echo "$venv/bin/txnsafety"
}

venv() {  # venv python packages...: a venv of that Python with the pinned packages
    local dir="$WORK/$1" python=$2
    shift 2
    [ -x "$dir/bin/python" ] || {
        "$python" -m venv "$dir"
        # the machine-wide pip configuration (extra indexes) is for this Python, not an old one
        "$dir/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 7))' \
            || PIP_CONFIG_FILE=/dev/null "$dir/bin/pip" install -q "pip<22"     # pip 18 (3.6) misreads PyPI
        PIP_CONFIG_FILE=/dev/null "$dir/bin/pip" install -q "$@"
    }
}

sdist() {  # name version: the release's sdist, unpacked once under WORK/src
    local name=$1 version=$2 dir="$WORK/src"
    mkdir -p "$dir"
    [ -d "$dir/$name-$version" ] || (cd "$dir" && python3 -m pip download -q --no-deps --no-binary :all: \
        "$name==$version" >&2 && tar xzf "$name-$version.tar.gz")
    echo "$dir/$name-$version"
}

prove() {  # project pristine-dir run-suite-function: the suite before, after --fix, after --unsafe-fixes
    local name=$1 pristine=$2 run=$3 txnsafety mode
    txnsafety="$(lint_venv)"
    rm -rf "$WORK/$name-before" && cp -r "$pristine" "$WORK/$name-before"
    (cd "$WORK/$name-before" && $run) > "$WORK/$name-before.txt" 2>&1 || true
    echo "== $name"
    echo "  before: $(python3 "$HERE/fix_suite_outcomes.py" "$WORK/$name-before.txt" | sed 's/^[^:]*: //')"
    for mode in safe unsafe; do
        local copy="$WORK/$name-$mode" flags=(--fix)
        [ "$mode" = unsafe ] && flags+=(--unsafe-fixes)
        rm -rf "$copy" && cp -r "$pristine" "$copy"
        (cd "$WORK" && "$txnsafety" lint "${flags[@]}" "${LINT_ARGS[@]}" "$name-$mode") \
            > "$WORK/$name-$mode-lint.txt" 2>&1 || true
        diff -ru "$pristine" "$copy" -x '*.pyc' -x __pycache__ > "$WORK/$name-$mode.diff" || true
        local fixed
        fixed="$(grep -o 'fixed [0-9]* finding' "$WORK/$name-$mode-lint.txt" | grep -o '[0-9]*' || echo 0)"
        if [ ! -s "$WORK/$name-$mode.diff" ]; then
            echo "  --fix ($mode): no fix applied, suite as before"
            continue
        fi
        (cd "$copy" && $run) > "$WORK/$name-$mode.txt" 2>&1 || true
        local verdict
        verdict="$(python3 "$HERE/fix_suite_outcomes.py" "$WORK/$name-before.txt" "$WORK/$name-$mode.txt")" \
            || STATUS=1
        echo "  --fix ($mode): $fixed finding(s) fixed; $(echo "$verdict" | sed -n '2s/^[^:]*: //p');" \
            "$(echo "$verdict" | tail -n 1)"
    done
    [ -s "$WORK/$name-unsafe.diff" ] || return 0
    # a green suite proves something only if it runs the fixed code: with a raise after each
    # locked read the fixes wrote, tests must fail
    rm -rf "$WORK/$name-probe" && cp -r "$WORK/$name-unsafe" "$WORK/$name-probe"
    grep '^+++ ' "$WORK/$name-unsafe.diff" | awk '{print $2}' | sed "s#^$WORK/$name-unsafe/#$WORK/$name-probe/#" \
        | xargs python3 "$HERE/fix_probe.py" > /dev/null || { echo "  probe: no locked read to probe"; return 0; }
    (cd "$WORK/$name-probe" && $run) > "$WORK/$name-probe.txt" 2>&1 || true
    echo "  fixed code run by the suite: with a raise after each locked read the fix wrote," \
        "$(python3 "$HERE/fix_suite_outcomes.py" "$WORK/$name-probe.txt" | sed 's/^[^:]*: //')"
}

django_axes() {  # 5.19.0: its tests/ in the sdist, pytest-django, SQLite
    venv axes-venv python3 "django>=3.2,<3.3" "django-ipware>=3,<4" "pytest<8" "pytest-django<4.6" \
        pytest-subtests
    local src
    src="$(sdist django-axes 5.19.0)"
    run_axes() { "$WORK/axes-venv/bin/python" -m pytest -q -rfE -p no:cacheprovider -o addopts= tests; }
    prove django-axes "$src" run_axes
}

django_allauth() {  # 0.32.0 (2017): Django 1.11 on Python 3.6, the tests inside the package, SQLite
    venv allauth-venv "$PY36" "django==1.11.29" "python3-openid==3.2.0" "requests-oauthlib==1.3.1" \
        "oauthlib==3.1.1" "requests==2.27.1" "idna<3" mock
    local src
    src="$(sdist django-allauth 0.32.0)"
    run_allauth() { "$WORK/allauth-venv/bin/python" -m django test --settings=test_settings allauth; }
    prove django-allauth "$src" run_allauth
}

edx_submissions() {  # 3.5.1: the sdist's code (the same as the tag's) with the tag's tests, SQLite
    venv edxsub-venv "$PY38" "django>=3.2,<3.3" "djangorestframework<3.13" "django-model-utils==4.2.0" \
        "jsonfield==3.1.0" "pytz==2021.3" ddt "factory_boy==3.2.1" "freezegun==1.1.0" "mock==4.0.3" \
        "pytest==6.2.5" "pytest-django==4.5.2" python-dateutil
    local git="${EDX_SUBMISSIONS_GIT:-$WORK/edx-submissions.git}" src="$WORK/src/edx-submissions-3.5.1-git"
    [ -d "$git" ] || git clone -q --bare https://github.com/openedx/edx-submissions "$git"
    [ -d "$src" ] || { mkdir -p "$src" && git -C "$git" archive 3.5.1 | tar x -C "$src"; }
    local released
    released="$(sdist edx-submissions 3.5.1)"
    diff -rq "$released/submissions" "$src/submissions" -x tests -x submissions.html > /dev/null \
        || { echo "edx-submissions: the tag's code is not the release's" >&2; exit 1; }
    run_edxsub() { "$WORK/edxsub-venv/bin/python" -m pytest -q -rfE -p no:cacheprovider -o addopts=; }
    prove edx-submissions "$src" run_edxsub
}

for project in ${PROJECTS[@]}; do
    case "$project" in
        django-axes) django_axes ;;
        django-allauth) django_allauth ;;
        edx-submissions) edx_submissions ;;
        *) echo "unknown project $project" >&2; exit 2 ;;
    esac
done
exit $STATUS
