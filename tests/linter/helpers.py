"""Shared helpers for the linter tests."""
from __future__ import annotations

import re
from pathlib import Path

from txnsafety_lint.facts.config import Config

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "lint"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>TXN\d{3}(?:\s*,\s*TXN\d{3})*)")
_CONFIG = re.compile(r"#\s*txnsafety-config:\s*(?P<body>.*)")


#: The model the SQLAlchemy snippets of the linter tests share: a declarative ``Base`` and
#: an ``Account`` (``id``, ``n``); the snippet imports ``DeclarativeBase``, ``Mapped`` and
#: ``mapped_column`` itself.  Starts with the two blank lines that follow the imports.
ACCOUNT_MODEL = """

class Base(DeclarativeBase):
    pass


class Account(Base):
    __tablename__ = "account"
    id: Mapped[int] = mapped_column(primary_key=True)
    n: Mapped[int] = mapped_column(default=0)
"""


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("*.py"))


def expected(source: str) -> set[tuple[int, str]]:
    out = set()
    for i, line in enumerate(source.splitlines(), 1):
        m = _EXPECT.search(line)
        if m:
            for code in re.split(r"\s*,\s*", m.group("codes")):
                out.add((i, code))
    return out


def fixture_config(source: str) -> Config:
    cfg = Config()
    for line in source.splitlines()[:5]:
        m = _CONFIG.search(line)
        if m:
            mapping = {}
            for part in m.group("body").split(";"):
                if "=" in part:
                    k, v = part.split("=", 1)
                    mapping[k.strip()] = v.strip()
            cfg.update(mapping)
    return cfg
