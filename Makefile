# Each target sets itself up from nothing: it needs only python3 with pip and venv.

PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# reinstall when the dependencies change
STAMP := $(VENV)/.installed
PYTEST := $(VENV_PYTHON) -m pytest -n 2 --dist loadfile

.PHONY: test test-slow demo bench

test: $(STAMP)
	$(PYTEST) -m "not slow"

# exit status 5 means that no test is marked slow: not a failure
test-slow: $(STAMP)
	$(PYTEST) -m slow || test $$? -eq 5

demo: $(STAMP)
	$(VENV_PYTHON) -m bartz.demo

bench: $(STAMP)
	$(VENV_PYTHON) benchmarks/speed.py

$(VENV_PYTHON):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VENV_PYTHON)
	$(VENV_PYTHON) -m pip install -e '.[test]'
	touch $@
