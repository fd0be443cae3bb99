# The two commands: `make demo` runs the embedded default (local launcher, CPU,
# tiny model) end to end; `make test` runs the tests. Each sets up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-furiosa furiosa-env test-k8s k8s-binaries lint clean

# Each step said as it is done, with pip's own progress: the first run downloads torch and
# the rest, which takes minutes.
$(STAMP): pyproject.toml
	@echo "== setting up $(VENV) (first run only, or after pyproject.toml changed)"
	python3 -m venv $(VENV)
	@echo "== upgrading pip in $(VENV)"
	$(PY) -m pip install --upgrade pip
	@# torch first, pinned: the CPU wheel; an open range would pull a CUDA build.
	@echo "== installing torch 2.13.0, the CPU wheel (the largest download)"
	$(PY) -m pip install torch==2.13.0
	@echo "== installing rngdctl (editable), transformers, peft, textual, pytest, ruff, ..."
	$(PY) -m pip install -e '.[trainer,dev,smi]'
	touch $(STAMP)

# The shell traps Ctrl-C (a handler, so the demo still gets it): it waits while the demo
# cancels its run, and the PATH hint still comes last. The demo's exit status is make's.
demo: $(STAMP)
	@trap : INT; $(VENV)/bin/rngdctl demo $(DEMO_ARGS); status=$$?; \
		echo "rngdctl is in $(VENV)/bin; to put it on PATH: . $(VENV)/bin/activate"; \
		exit $$status

# The main suite, then the tests that need the real furiosa-torch (torch 2.10.0) in its own
# environment (see furiosa-env), then the launcher against a real control plane (test-k8s).
test: $(STAMP)
	$(PY) -m pytest -q --ignore=tests/furiosa --ignore=tests/k8s/real $(TEST_ARGS)
	$(MAKE) --no-print-directory test-furiosa
	$(MAKE) --no-print-directory test-k8s

# furiosa-torch pins torch 2.10.0, a CUDA build of about 7 GB: a second environment, built
# once outside the clone (~/.cache/rngdctl/furiosa-env-<hash of its pins>) and reused.
furiosa-env:
	python3 deploy/furiosa/env.py build

# Where the environment cannot be built, these run with .venv and skip, naming the reason.
FURIOSA_TESTS := tests/furiosa tests/trainer/test_trainer_numerics.py tests/trainer/test_furiosa_modules.py
test-furiosa: $(STAMP)
	$(PY) deploy/furiosa/env.py pytest -q -p no:cacheprovider -W ignore::pytest.PytestConfigWarning \
		$(FURIOSA_TESTS)

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok at the
# release deploy/k8s-test/go.mod pins, built from the Go module registry once, outside the
# clone (~/.cache/rngdctl/k8s-<hash of the pins>), and reused.
k8s-binaries:
	python3 deploy/k8s-test/k8s_binaries.py build

# The k8s launcher against that control plane. Where the binaries cannot be built, the
# build says why in <cache>.failed and the tests skip naming it.
test-k8s: $(STAMP)
	-python3 deploy/k8s-test/k8s_binaries.py build
	$(PY) -m pytest -q -p no:cacheprovider tests/k8s/real

# ruff, then the commit subjects (at most 72 characters; .ci/commit_subjects.py says which).
lint: $(STAMP)
	$(VENV)/bin/ruff check rngdctl daemon trainer tests bench .ci
	$(PY) .ci/commit_subjects.py

clean:
	rm -rf $(VENV) .pytest_cache
