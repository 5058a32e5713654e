"""Packaging hook: the code pages ship in the wheel from their single source, docs/codes/.

Everything else is declared in setup.cfg.  ``build_py`` copies ``docs/codes/*.md`` into
``txnsafety/code_pages/`` of the build, so ``txnsafety codes TXN102`` works from a wheel;
an editable install reads docs/codes/ itself (txnsafety/code_pages.py).
"""
from __future__ import annotations

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithCodePages(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        here = os.path.dirname(os.path.abspath(__file__))
        target = os.path.join(self.build_lib, "txnsafety", "code_pages")
        os.makedirs(target, exist_ok=True)
        for page in sorted(glob.glob(os.path.join(here, "docs", "codes", "*.md"))):
            shutil.copy2(page, target)


setup(cmdclass={"build_py": BuildPyWithCodePages})
