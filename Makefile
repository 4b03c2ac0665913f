# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: venv demo test lint format bench clean

venv: $(INSTALLED)

$(INSTALLED): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(INSTALLED)

# The synthetic video set is made once; the stamp is remade (and the set with it)
# only when the generator changes.
SAMPLE_DATA := data/sample

$(SAMPLE_DATA)/.complete: parallel_loader/sample_data.py | venv
	rm -rf $(SAMPLE_DATA)
	$(PY) -m parallel_loader.sample_data $(SAMPLE_DATA) --classes 5 --per-class 20
	touch $@

demo: venv $(SAMPLE_DATA)/.complete
	$(PY) examples/train_video.py --data $(SAMPLE_DATA) --threads 2 --min-val-accuracy 0.9

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: lint
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
