# Two commands for a newcomer: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit venv system-deps clean bench chaos chaos-read-only

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,embedded]'
	@touch $(STAMP)

venv: $(STAMP)

system-deps:
	@bash scripts/ensure-system-deps.sh

demo: venv system-deps
	$(VENV)/bin/cdc demo

# The whole suite.  pytest exits 5 when it collects nothing, which fails make too.
test: venv system-deps
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(PY) -m pytest tests

unit: venv
	$(PY) -m pytest tests/unit

# Stream, snapshot and merge benchmarks (about 10 minutes) into docs/benchmarks.md.
bench: venv system-deps
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc bench report --out docs/benchmarks.md

# A long chaos run (processes killed under load; must end equal).  SEED=n picks the plan.
chaos: venv system-deps
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc chaos --seed $${SEED:-1}

# The same with read-only snapshots, as a CDC user that may not write to the source.
chaos-read-only: venv system-deps
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(VENV)/bin/cdc chaos --read-only --seed $${SEED:-1}

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
