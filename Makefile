# The two commands: `make demo` runs the embedded default (local launcher, CPU,
# tiny model) end to end; `make test` runs the tests. Each sets up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the CPU wheel; an open range would pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[trainer,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rngdctl demo $(DEMO_ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(TEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check rngdctl daemon trainer tests bench

clean:
	rm -rf $(VENV) .pytest_cache
