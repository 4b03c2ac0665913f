# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: venv demo demo-multiworker test servers lint format docs bench bench-gpu clean

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

# The benchmarks' extras (matplotlib, for the sweep's plots; decord2, the video benchmarks' peer reader),
# on top of the dev install.
PLOT := $(VENV)/.plot

$(PLOT): $(INSTALLED)
	$(PY) -m pip install --quiet -e '.[dev,plot,bench]'
	touch $(PLOT)

# Two MultiWorkerMirroredStrategy workers on 127.0.0.1 (ports from the OS), each reading its shard of every epoch.
demo-multiworker: venv $(SAMPLE_DATA)/.complete
	$(PY) examples/launch_multiworker.py --workers 2 --timeout 1200 --min-val-accuracy 0.9 -- \
		--data $(SAMPLE_DATA) --threads 1 --intra-op 1

# Every benchmark with its README settings (about an hour on 2 cores); tables in benchmarks/README.md.
# The 30-minute soak runs apart: python -m benchmarks.soak --minutes 30
bench: venv $(PLOT) $(SAMPLE_DATA)/.complete
	$(PY) -m benchmarks.queue_overhead --max-len 64 8 1 --quiet 8
	$(PY) -m benchmarks.sweep --workload latency --load 0.05 --step 0.01 --threads 1,2,5,10 --batches 300 \
		--out benchmarks/results/issue --quiet 5
	$(PY) -m benchmarks.sweep --workload latency --batches 300 --quiet 5
	$(PY) -m benchmarks.sweep --workload decode --threads 1,2,4,8 --serial --batches 30 --calibrate 10 --quiet 8
	$(PY) -m benchmarks.compare --quiet 8
	$(PY) -m benchmarks.sweep --workload train --threads 1,2,4 --batches 15 --calibrate 5 --quiet 8
	$(PY) -m benchmarks.feed_vs_queue --steps 2000 --rounds 2 --quiet 8
	$(PY) -m benchmarks.video_decode --quiet 5
	$(PY) -m benchmarks.video_cold --rounds 5 --quiet 5
	$(PY) -m benchmarks.video_families --rounds 3
	$(PY) -m benchmarks.video_first_touch --rounds 5 --codec vp9 vp8 av1
	$(PY) -m benchmarks.video_memory --rounds 5
	$(PY) -m benchmarks.video_resize --rounds 5
	$(PY) -m benchmarks.video_shards --rounds 7 --server nginx
	$(PY) -m benchmarks.video_shards --rounds 7 --server rclone
	$(PY) -m benchmarks.video_shards --rounds 7 --server moto
	$(PY) -m benchmarks.epoch_boundary --rounds 3 --quiet 5
	$(PY) -m benchmarks.sweep --workload latency --load 0.05 --load-max 0.1 --step 0.005 \
		--threads 4,8,12,16,24,32,auto --batches 300 --rounds 2 --quiet 5
	$(PY) -m benchmarks.sweep --workload shift --load 0.02 --load-after 0.08 --step 0.005 \
		--threads 4,8,16,24,auto --batches 300 --rounds 2 --quiet 5
	$(PY) -m benchmarks.sweep --workload shift --load 0.02 --load-after 0.08 --step 0.01 \
		--threads 8,auto --batches 300 --rounds 3 --quiet 5
	$(PY) -m benchmarks.sweep --workload decode --threads 1,2,3,4,auto --batches 300 --rounds 2 --calibrate 5 --quiet 8
	$(PY) -m benchmarks.faults --runs 1000 --seed 0
	$(PY) -m benchmarks.processes --rounds 3 --quiet 30
	$(PY) -m benchmarks.process_faults --runs 500 --seed 0
	$(PY) -m benchmarks.epoch_draws
	$(PY) -m benchmarks.store_scale --records 2000000
	$(PY) -m benchmarks.store_faults
	$(PY) -m benchmarks.host_scale --rounds 3
	$(PY) -m benchmarks.table_scale

# The GPU run: the demo (as `make demo` runs it), the sweep's train workload and feed_vs_queue, each with
# and without device prefetch, with GPU utilisation sampled by nvidia-smi; one table at the end.
# Without a GPU, check that it all runs: make bench-gpu BENCH_GPU_ARGS="--short --device /CPU:0"
BENCH_GPU_ARGS ?=
bench-gpu: venv $(SAMPLE_DATA)/.complete
	$(PY) -m benchmarks.gpu_run --data $(SAMPLE_DATA) $(BENCH_GPU_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The documentation site, into docs/_build/html: warnings are errors, and so is every broken reference.
docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -n -E -q -b html docs docs/_build/html

# The server tests run nginx. Where it is missing, it comes from the system's packages (root and apt-get, as on a
# fresh CI machine); elsewhere this says so, and its tests are skipped with the command to install it.
servers:
	@if ! command -v nginx >/dev/null 2>&1 && ! test -x /usr/sbin/nginx; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing nginx for the server tests (apt-get install nginx)"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get update -qq >/dev/null && apt-get install -y -qq nginx >/dev/null; \
		else \
			echo "nginx is missing and cannot be installed here (needs root and apt-get): its server tests are skipped"; \
		fi; \
	fi

test: lint docs servers
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache docs/_build docs/api
