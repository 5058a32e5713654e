#!/usr/bin/env bash
# Run the own test suites of the real Flask / FastAPI + SQLAlchemy applications of
# docs/real-suites.md, unchecked and checked (strict, report mode), wired as the README
# says by the pytest plugins beside this script.  Usage:
#
#   bash benchmarks/real_suites/run_web_suites.sh WORK [ihatemoney] [fastapi-template] [privacyidea]
#
# WORK keeps the virtualenvs, sources and results (WORK/<suite>-{unchecked,checked}.txt,
# WORK/<suite>-report.json).  The FastAPI template needs PostgreSQL
# (TXNSAFETY_TEST_POSTGRES_URL, default the CI's server) and git to fetch its tag 0.9.0.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
WORK="${1:?usage: run_web_suites.sh WORK [suite...]}"
shift
SUITES=("${@:-ihatemoney fastapi-template}")
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
PG="${TXNSAFETY_TEST_POSTGRES_URL:-postgresql://txnsafety:txnsafety@127.0.0.1:5432/txnsafety}"

run_both() {  # name python dir tests-path plugin-dir [extra checked args...]
    # (tests: one or more paths, split on spaces)
    local name=$1 python=$2 dir=$3 tests=$4 wiring=$5
    shift 5
    (cd "$dir" && "$python" -m pytest -q -p no:cacheprovider -p no:txnsafety $tests \
        > "$WORK/$name-unchecked.txt" 2>&1 || true)
    (cd "$dir" && PYTHONPATH="$wiring:${PYTHONPATH:-}" "$python" -m pytest -q -p no:cacheprovider \
        -p txnsafety_wiring --txnsafety-mode=report --txnsafety-json="$WORK/$name-report.json" "$@" $tests \
        > "$WORK/$name-checked.txt" 2>&1 || true)
    echo "== $name"
    tail -n 1 "$WORK/$name-unchecked.txt" | sed 's/^/  unchecked: /'
    tail -n 1 "$WORK/$name-checked.txt" | sed 's/^/  checked:   /'
    grep -E "^= txnsafety report mode|^- txnsafety: outside any request" "$WORK/$name-checked.txt" || true
}

ihatemoney() {
    local venv="$WORK/ihm-venv"
    [ -x "$venv/bin/python" ] || {
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q 'ihatemoney==7.2.1' pytest 'pytest-flask~=1.3.0' webob
        "$venv/bin/pip" install -q --no-deps -e "$REPO"
    }
    [ -d "$WORK/ihatemoney-7.2.1" ] || (cd "$WORK" && "$venv/bin/pip" download -q --no-deps --no-binary :all: \
        ihatemoney==7.2.1 && tar xzf ihatemoney-7.2.1.tar.gz)
    run_both ihatemoney "$venv/bin/python" "$WORK/ihatemoney-7.2.1" ihatemoney/tests "$HERE/ihatemoney"
}

fastapi_template() {
    local venv="$WORK/fsft-venv" src="$WORK/fsft/backend" db="${PG%/*}/txnsafety_fsft"
    [ -d "$src" ] || { mkdir -p "$WORK/fsft"; git clone -q https://github.com/fastapi/full-stack-fastapi-template \
        "$WORK/fsft-repo" && git -C "$WORK/fsft-repo" archive 0.9.0 backend .env | tar x -C "$WORK/fsft"; }
    [ -x "$venv/bin/python" ] || {
        python3 -m venv "$venv"
        # the versions of the tag's uv.lock
        "$venv/bin/pip" install -q "fastapi[standard]==0.115.0" "fastapi-cli==0.0.5" "starlette==0.38.6" \
            "sqlmodel==0.0.24" "sqlalchemy==2.0.35" "pydantic==2.12.4" "pydantic-settings==2.12.0" \
            "sentry-sdk[fastapi]==1.45.1" "passlib[bcrypt]==1.7.4" "bcrypt==4.3.0" "emails==0.6" \
            "httpx==0.28.1" "psycopg[binary]==3.2.2" "pyjwt==2.10.1" "tenacity<9" alembic jinja2 \
            python-multipart email-validator "pytest<8" webob asgiref
        "$venv/bin/pip" install -q --no-deps -e "$REPO"
    }
    psql "$PG" -qc "drop database if exists txnsafety_fsft" -c "create database txnsafety_fsft"
    local user_pass="${db#postgresql://}"
    user_pass="${user_pass%@*}"
    local host_port="${db#*@}"
    host_port="${host_port%/*}"
    export POSTGRES_SERVER="${host_port%:*}" POSTGRES_PORT="${host_port#*:}" POSTGRES_USER="${user_pass%:*}" \
        POSTGRES_PASSWORD="${user_pass#*:}" POSTGRES_DB=txnsafety_fsft PYTHONPATH="$src"
    (cd "$src" && "$venv/bin/alembic" upgrade head > /dev/null 2>&1)
    run_both fastapi-template "$venv/bin/python" "$src" tests "$HERE/fastapi_template"
    unset PYTHONPATH
}

privacyidea() {
    # its validate API tests and the failcounter's (the whole suite is some 3,000 tests):
    # SQLite files, Redis off (its fixtures FLUSHDB the Redis DB they are given)
    local venv="$WORK/pi-venv" src="$WORK/privacyidea-3.14"
    [ -d "$src" ] || (cd "$WORK" && python3 -m pip download -q --no-deps --no-binary :all: privacyidea==3.14 \
        && tar xzf privacyidea-3.14.tar.gz)
    [ -x "$venv/bin/python" ] || {
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q -r "$src/requirements.txt"
        "$venv/bin/pip" install -q -r "$src/tests/requirements.txt"
        "$venv/bin/pip" install -q --no-deps -e "$src"
        "$venv/bin/pip" install -q webob asgiref
        "$venv/bin/pip" install -q --no-deps -e "$REPO"
    }
    local tests
    tests="$(cd "$src" && ls tests/test_api_validate*.py tests/test_lib_token_failcounter.py | tr '\n' ' ')"
    rm -f "$WORK"/pi-*.sqlite
    unset PI_REDIS_URL
    export TEST_REDIS_URL=
    TEST_DATABASE_URL="sqlite:///$WORK/pi-unchecked.sqlite" run_both privacyidea "$venv/bin/python" "$src" \
        "$tests" "$HERE/privacyidea"
}

for suite in ${SUITES[@]}; do
    case "$suite" in
        ihatemoney) ihatemoney ;;
        fastapi-template) fastapi_template ;;
        privacyidea) privacyidea ;;
        *) echo "unknown suite $suite" >&2; exit 2 ;;
    esac
done
