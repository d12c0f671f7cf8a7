# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP_FLAGS ?= -q -c constraints.txt

export DVC_NO_ANALYTICS=1
export MLFLOW_DISABLE_TELEMETRY=true
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1

.PHONY: demo test bench clean-venv

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/rscale demo

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) benchmarks/law_speed.py

clean-venv:
	rm -rf $(VENV)
