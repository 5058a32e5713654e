"""txnsafety_lint: static analysis for data stomping (flake8 plugin, CLI, pre-commit)."""
