#!/usr/bin/env bash
# The code checks configured in pyproject.toml: ruff (lint), mypy --strict (types) and
# import-linter (layers and independence of the packages). Exits non-zero at the first
# check that fails. Run by scripts/test.sh before the tests; needs the .venv it makes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian-deps.sh
step "ruff check (rules: pyproject.toml [tool.ruff])"
.venv/bin/ruff check --quiet .
step "mypy --strict feddns controller stubzone links"
.venv/bin/mypy
step "lint-imports (contracts: pyproject.toml [tool.importlinter])"
.venv/bin/lint-imports --no-cache
