# The two commands a newcomer needs: `make run` (serve a demo) and `make test` (the whole suite).
# `make run` serves what production serves: the ASGI entry (the API, the pages and `/mcp`) under gunicorn.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test install lint bench-scale bench-scale-quick bench-locomo bench-sqlite clean-db

$(BIN)/.installed: pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/pip install --quiet -e clients/python
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/python manage.py migrate --verbosity 0
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py setup_demo --url http://$(HOST):$(PORT)/
	$(BIN)/gunicorn ekko_site.asgi --worker-class uvicorn_worker.UvicornWorker --bind $(HOST):$(PORT) --workers 1

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .

bench-scale: install
	$(BIN)/python bench/scale.py

bench-scale-quick: install
	$(BIN)/python bench/scale.py --quick

bench-locomo: install
	$(BIN)/python bench/locomo.py

bench-sqlite: install
	$(BIN)/python bench/sqlite_io.py --nodes 100000

clean-db:
	rm -rf .ekko
