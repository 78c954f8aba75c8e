# Each target sets itself up from nothing: it needs only python3 with pip and venv.

PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# reinstall when the dependencies change
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
PYTEST := $(VENV_PYTHON) -m pytest -n 2 --dist loadfile

.PHONY: test test-slow demo bench notebooks docs

test: $(STAMP)
	$(PYTEST) -m "not slow"

# exit status 5 means that no test is marked slow: not a failure
test-slow: $(STAMP)
	$(PYTEST) -m slow || test $$? -eq 5

demo: $(STAMP)
	$(VENV_PYTHON) -m bartz.demo

bench: $(STAMP)
	$(VENV_PYTHON) benchmarks/speed.py

# run every notebook and store it with its new outputs
notebooks: $(STAMP)
	$(VENV_PYTHON) notebooks/execute.py

# the site from the docs and the docstrings, into docs/_build/html; any warning fails it (docs/testing.md).
# The API pages are generated afresh: a stale one of a module no longer listed would fail the build.
docs: $(DOCS_STAMP)
	rm -rf docs/generated
	$(VENV_PYTHON) -m sphinx -W --keep-going -n -j auto -b html docs docs/_build/html

$(VENV_PYTHON):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VENV_PYTHON)
	$(VENV_PYTHON) -m pip install -e '.[test]'
	touch $@

$(DOCS_STAMP): pyproject.toml | $(VENV_PYTHON)
	$(VENV_PYTHON) -m pip install -e '.[docs]'
	touch $@
