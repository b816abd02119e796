# The two commands a newcomer needs:
#   make demo   - installs everything into .venv, then trains a Pre-LN baseline and a NormFormer
#                 on a corpus built from the Python standard library's docstrings
#   make test   - installs everything (with test extras) into .venv, then runs the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements/*.txt setup.py scripts/install.sh | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=
# make demo DEMO_ARGS="--updates 300 --stop-time-hours 0.2": options of python -m fairseq_normformer.cli.demo
DEMO_ARGS ?=
# Test processes: one per core; a file's tests stay in one process (module fixtures are built once).
PYTEST_WORKERS ?= 2
# pytest caches its rewritten test modules as bytecode, unless PYTHONDONTWRITEBYTECODE is set (as on some CI images):
# then each test process rewrites and compiles all of tests/ again, ~7 s of CPU (docs/install.md).
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest

.PHONY: install demo test test-fast bench clean-demo

$(STAMP):
	@test -x $(PY) || python3 -m venv --system-site-packages $(VENV)
	bash scripts/install.sh $(PY) --test
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m fairseq_normformer.cli.demo --workdir work/demo $(DEMO_ARGS)

test: $(STAMP)
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadfile tests $(PYTEST_ARGS)

# The edit loop's tier: every module's unit tests and an end-to-end run of each console script, without the
# tests marked slow (multi-process, recipes, long end-to-end runs). make test (and CI) runs everything.
test-fast: $(STAMP)
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadfile -m "not slow" tests $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks measure
