"""``txnsafety lint`` in a real git repository: roles, .gitignore, exclude, per-file-ignores,
one configuration for the command and flake8, clear errors, odd files."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from txnsafety_lint.selection import files as files_module
from txnsafety_lint.cli import main
from txnsafety_lint.selection.settings import ConfigError, load_settings

from .helpers import FIXTURES

RACY = (FIXTURES / "django_txn101.py").read_text()       # three TXN101 findings
PER_FILE = 3
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def write(root, rel, text=RACY):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path):
    """A Django-shaped project under git: an app module with real findings, migrations,
    tests, a factory, generated code that .gitignore lists, a management command."""
    root = tmp_path / "proj"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env={**os.environ, **GIT_ENV})
    write(root, "pyproject.toml", "[project]\nname = 'shop'\n\n[tool.txnsafety]\n")
    write(root, ".gitignore", "generated/\n*_pb2.py\n")
    write(root, "shop/views.py")
    write(root, "shop/management/commands/close_accounts.py")
    write(root, "shop/migrations/0002_backfill.py")
    write(root, "shop/tests/test_views.py")
    write(root, "shop/factories.py")
    write(root, "generated/client.py")
    write(root, "shop/api_pb2.py")
    write(root, "setup.py")
    return root


def shown_paths(out):
    return sorted({line.split(":", 1)[0] for line in out.splitlines() if ": TXN" in line})


@needs_git
def test_defaults_report_app_code_only(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    assert main(["."]) == 1
    out = capsys.readouterr().out
    assert shown_paths(out) == ["shop/views.py"]
    assert out.splitlines()[-1] == (
        f"{5 * PER_FILE} findings not shown: {2 * PER_FILE} in tests, {PER_FILE} in migrations, "
        f"{PER_FILE} in scripts, {PER_FILE} in commands (--include-tests, --include-migrations, "
        f"--include-scripts, --include-commands to show them)")
    assert "generated/" not in out and "_pb2" not in out


@needs_git
def test_include_options_and_settings(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    main([".", "--include-tests", "--include-migrations", "--include-commands"])
    out = capsys.readouterr().out
    assert "shop/tests/test_views.py" in shown_paths(out)
    assert "shop/factories.py" in shown_paths(out)
    assert "shop/migrations/0002_backfill.py" in shown_paths(out)
    assert "shop/management/commands/close_accounts.py" in shown_paths(out)
    assert out.splitlines()[-1] == (f"{PER_FILE} findings not shown: {PER_FILE} in scripts "
                                    f"(--include-scripts to show them)")
    (repo / "pyproject.toml").write_text("[tool.txnsafety]\ninclude-tests = true\n"
                                         "include-scripts = true\ninclude-migrations = true\n"
                                         "include-commands = true\n")
    main(["."])
    out = capsys.readouterr().out
    assert "not shown" not in out and "setup.py" in shown_paths(out)


@needs_git
def test_roles_apply_to_files_passed_by_name(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo / "shop")
    assert main(["tests/test_views.py", "migrations/0002_backfill.py"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{2 * PER_FILE} findings not shown: {PER_FILE} in tests, {PER_FILE} in migrations "
        f"(--include-tests, --include-migrations to show them)"]


@needs_git
def test_gitignore_respected_unless_turned_off(repo, capsys, monkeypatch):
    write(repo, "shop/keep_pb2.py")
    write(repo, "shop/.gitignore", "!keep_pb2.py\n")             # a nested negation
    monkeypatch.chdir(repo)
    main(["."])
    paths = shown_paths(capsys.readouterr().out)
    assert "shop/keep_pb2.py" in paths and "shop/api_pb2.py" not in paths
    assert "generated/client.py" not in paths
    main([".", "--no-respect-gitignore"])
    paths = shown_paths(capsys.readouterr().out)
    assert "generated/client.py" in paths and "shop/api_pb2.py" in paths
    (repo / "pyproject.toml").write_text("[tool.txnsafety]\nrespect-gitignore = false\n")
    main(["."])
    assert "generated/client.py" in shown_paths(capsys.readouterr().out)


@needs_git
def test_exclude_extend_exclude_and_force_exclude(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    write(repo, "build/lib/shop/views.py")                      # a default exclude
    write(repo, "legacy/old.py")
    main(["."])
    paths = shown_paths(capsys.readouterr().out)
    assert "legacy/old.py" in paths and not any(p.startswith("build/") for p in paths)
    (repo / "pyproject.toml").write_text('[tool.txnsafety]\nextend-exclude = ["legacy"]\n')
    main(["."])
    paths = shown_paths(capsys.readouterr().out)
    assert "legacy/old.py" not in paths and not any(p.startswith("build/") for p in paths)
    # exclude replaces the defaults (Ruff's semantics): build/ is checked again
    (repo / "pyproject.toml").write_text('[tool.txnsafety]\nexclude = ["legacy/*.py"]\n')
    main(["."])
    paths = shown_paths(capsys.readouterr().out)
    assert "legacy/old.py" not in paths and "build/lib/shop/views.py" in paths
    # a file named explicitly is checked, unless --force-exclude
    assert main(["legacy/old.py"]) == 1
    capsys.readouterr()
    assert main(["legacy/old.py", "--force-exclude"]) == 0
    assert capsys.readouterr().out == ""
    (repo / "pyproject.toml").write_text('[tool.txnsafety]\nextend-exclude = ["legacy"]\n'
                                         'force-exclude = true\n')
    assert main(["legacy/old.py"]) == 0


@needs_git
def test_per_file_ignores(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    (repo / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.txnsafety]
        per-file-ignores = {"shop/management/**" = ["TXN101"]}
        extend-per-file-ignores = {"views.py" = ["TXN1"]}
        """))
    assert main(["."]) == 0
    assert shown_paths(capsys.readouterr().out) == []
    (repo / "pyproject.toml").write_text('[tool.txnsafety]\n'
                                         'per-file-ignores = {"views.py" = ["TXN102"]}\n')
    main(["."])
    assert "shop/views.py" in shown_paths(capsys.readouterr().out)


@needs_git
def test_same_output_from_any_working_directory(repo, capsys, monkeypatch):
    outs = []
    for cwd, arg in ((repo, "."), (repo / "shop", ".."), (repo.parent, str(repo)),
                     (repo / "shop" / "tests", str(repo))):
        monkeypatch.chdir(cwd)
        main([arg, "--format", "json"])
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] == outs[2] == outs[3]
    assert '"path": "shop/views.py"' in outs[0] and "./" not in outs[0] and str(repo) not in outs[0]


@pytest.mark.parametrize("body, message", [
    ('exclud = ["x"]', "pyproject.toml: [tool.txnsafety] unknown key 'exclud' "
                       "(did you mean 'exclude'?)"),
    ('exclude = "build"', "pyproject.toml: [tool.txnsafety] bad value for 'exclude': "
                          "expected a list of strings"),
    ('isolation = "chaos"', "pyproject.toml: [tool.txnsafety] bad value for 'isolation': "
                            "unknown isolation level 'chaos'"),
    ("max-bytes = -1", "[tool.txnsafety] bad value for 'max-bytes'"),
    ('enable = ["TXN999"]', "[tool.txnsafety] bad value for 'enable': unknown code 'TXN999'"),
    ('per-file-ignores = {"x.py" = ["E501"]}', "bad value for 'per-file-ignores': unknown code"),
    ('per-file-roles = {"x.py" = "tset"}', "bad value for 'per-file-roles': unknown role"),
    ('respect-gitignore = "no"', "bad value for 'respect-gitignore': expected true or false"),
])
def test_config_errors_name_key_and_file(tmp_path, capsys, monkeypatch, body, message):
    write(tmp_path, "pyproject.toml", f"[tool.txnsafety]\n{body}\n")
    write(tmp_path, "app.py")
    monkeypatch.chdir(tmp_path)
    assert main(["."]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and message in captured.err, captured.err


def test_flake8_file_errors_name_the_file(tmp_path, capsys):
    write(tmp_path, "setup.cfg", "[flake8]\ntxn-isolaton = serializable\n")
    write(tmp_path, "app.py")
    assert main([str(tmp_path)]) == 2
    assert "setup.cfg: [flake8] unknown key 'txn-isolaton' (did you mean 'txn-isolation'?)" \
        in capsys.readouterr().err
    with pytest.raises(ConfigError):
        load_settings(str(tmp_path))


def flake8(cwd, *args):
    proc = subprocess.run([sys.executable, "-m", "flake8", "--select", "TXN", *args],
                          capture_output=True, text=True, cwd=cwd)
    return proc


def test_command_and_flake8_read_the_same_configuration(tmp_path, capsys, monkeypatch):
    """flake8's txn-* options and [tool.txnsafety] are merged the same way by both; on a
    scalar conflict pyproject.toml wins; roles and per-file-ignores apply under flake8."""
    write(tmp_path, "setup.cfg", "[flake8]\ntxn-disable = TXN106\ntxn-isolation = read committed\n")
    write(tmp_path, "pyproject.toml", '[tool.txnsafety]\nisolation = "serializable"\n'
                                      'enable = ["TXN109"]\n'
                                      'per-file-ignores = {"legacy.py" = ["TXN"]}\n')
    src = textwrap.dedent("""\
        from django.db import transaction
        from shop.models import Account


        def bump(pk):
            with transaction.atomic():
                account = Account.objects.get(pk=pk)
                account.n += 1
                account.save()


        def rename(pk):
            with transaction.atomic():
                account = Account.objects.get(pk=pk)
                account.name = account.name.strip()
                account.save()
        """)
    write(tmp_path, "app.py", src)
    write(tmp_path, "legacy.py", src)
    write(tmp_path, "test_app.py", src)
    for iso, expected in (("serializable", []), ("read committed", ["app.py:16:9: TXN109"])):
        (tmp_path / "pyproject.toml").write_text(
            f'[tool.txnsafety]\nisolation = "{iso}"\nenable = ["TXN109"]\n'
            f'per-file-ignores = {{"legacy.py" = ["TXN"]}}\n')
        monkeypatch.chdir(tmp_path)
        main(["--no-cross-module", "."])
        mine = [line[:len("app.py:16:9: TXN109")] for line in capsys.readouterr().out.splitlines()
                if ": TXN" in line]
        theirs = [line[:len("app.py:16:9: TXN109")]
                  for line in flake8(tmp_path, "app.py", "legacy.py", "test_app.py").stdout.splitlines()]
        assert mine == theirs == expected, (iso, mine, theirs)


def test_flake8_unknown_key_is_one_line_exit_2(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.txnsafety]\nexclud = ["x"]\n')
    write(tmp_path, "app.py")
    proc = flake8(tmp_path, "app.py")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("txnsafety: configuration error: pyproject.toml: "
                                   "[tool.txnsafety] unknown key 'exclud' (did you mean 'exclude'?)")


def test_statistics(tmp_path, capsys):
    write(tmp_path, "app.py")
    write(tmp_path, "more.py", RACY + textwrap.dedent("""\


        def bump(pk):
            account = Account.objects.get(pk=pk)
            account.n += 1
            account.save()
        """))
    assert main([str(tmp_path), "--statistics"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == ["6     TXN101 half-protected", "1     TXN106 lost-update counter"]
    main([str(tmp_path), "--statistics", "--format", "json"])
    captured = capsys.readouterr()
    assert captured.out.startswith("[") and "TXN106 lost-update counter" in captured.err


def test_color(tmp_path, capsys, monkeypatch):
    write(tmp_path, "app.py")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    main([str(tmp_path), "--color", "always"])
    assert "\x1b[1;31mTXN101\x1b[0m" in capsys.readouterr().out
    main([str(tmp_path)])                                  # auto, and pytest's stdout is no tty
    assert "\x1b[" not in capsys.readouterr().out
    monkeypatch.setenv("FORCE_COLOR", "1")
    main([str(tmp_path)])
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    main([str(tmp_path)])
    assert "\x1b[" not in capsys.readouterr().out
    main([str(tmp_path), "--color", "always"])
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.delenv("NO_COLOR")
    main([str(tmp_path), "--color", "never"])
    assert "\x1b[" not in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_skipped_never_opened(tmp_path):
    write(tmp_path, "app.py")
    os.mkfifo(tmp_path / "pipe.py")
    for args in ([str(tmp_path)], [str(tmp_path / "pipe.py"), str(tmp_path / "app.py")]):
        proc = subprocess.run([sys.executable, "-m", "txnsafety_lint", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert "pipe.py: warning: skipped: a FIFO, not a regular file" in proc.stderr
        assert "app.py:11:9: TXN101" in proc.stdout


def test_unreadable_file_and_directory_exit_2(tmp_path, capsys, monkeypatch):
    write(tmp_path, "app.py")
    secret = write(tmp_path, "secret/views.py")
    real_open, real_scandir = open, os.scandir

    def deny_open(path, *args, **kwargs):
        if str(path).endswith("app.py"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    def deny_scandir(path="."):
        if str(path).endswith("secret"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr("builtins.open", deny_open)
    monkeypatch.setattr(files_module.os, "scandir", deny_scandir)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "app.py: error: cannot read file: Permission denied" in err
    assert f"{secret.parent.as_posix()}: error: cannot read directory: Permission denied" in err
    assert "Traceback" not in err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_for_real(tmp_path, capsys):  # pragma: no cover - not as root
    f = write(tmp_path, "app.py")
    f.chmod(0)
    try:
        assert main([str(tmp_path)]) == 2
        assert "cannot read file" in capsys.readouterr().err
    finally:
        f.chmod(0o644)


def test_cr_only_line_endings_keep_line_numbers(tmp_path, capsys):
    (tmp_path / "mac.py").write_bytes(RACY.replace("\n", "\r").encode())
    (tmp_path / "unix.py").write_text(RACY)
    for extra in ([], ["--no-cross-module"]):
        main([str(tmp_path / "mac.py"), str(tmp_path / "unix.py"), *extra])
        lines = capsys.readouterr().out.splitlines()
        mac = [line.split(": ")[0].split(":", 1)[1] for line in lines if "mac.py" in line]
        unix = [line.split(": ")[0].split(":", 1)[1] for line in lines if "unix.py" in line]
        assert mac == unix == ["11:9", "20:9", "26:9"], lines
