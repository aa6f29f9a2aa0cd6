# nbprec: the two commands of the README, and a few more for developers.
#   make demo   create the virtualenv, install nbprec, run the demo job and write its outputs
#   make test   create the virtualenv, install nbprec with its test extras, lint and run the whole suite

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= all,test
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
comma := ,
DEMO_OUT ?= demo-output
PYTEST_ARGS ?=

.PHONY: install demo test lint format bench clean report-assets labextension check-labextension

# nbprec's modules are byte-compiled, as a regular pip install does (an editable install leaves that to Python at
# import, which writes no bytecode where PYTHONDONTWRITEBYTECODE is set, as on CI and the benchmark machines: each
# command then compiled its modules from source every time it started: `nbprec compare` took 0.33 against 0.23 s on
# the 413 MB L1 pair of bench/README.md). Every make that installs does it again: modules edited since are compiled
# then (compileall skips the others).
install: $(STAMP)
	@$(BIN)/python -m compileall -q nbprec

# The editable install is setuptools' "compat" mode: a path entry in a .pth file. Its default mode installs an
# import hook instead, which every Python process of the virtualenv loads at start-up (pathlib, re, urllib and
# more: about 15 ms, half the start-up of an nbprec command served by the command daemon).

# The C extensions' sources and headers (setup.py lists what each extension is built from), and the capture's
# modules mypyc compiles (setup.py's COMPILED_CAPTURE): any edit reinstalls.
C_SOURCES := $(wildcard nbprec/*.c nbprec/*.h nbprec/*/*.c nbprec/*/*.h)
COMPILED_SOURCES := $(addprefix nbprec/capture/,backward.py gradients.py lines.py memo.py naming.py recorder.py signature.py stacks.py statistics.py tensors.py)

$(STAMP): Makefile pyproject.toml setup.py $(C_SOURCES) $(COMPILED_SOURCES) nbprec/labextension/package.json
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -e ".[$(EXTRAS)]" --config-settings editable_mode=compat
	@touch $(STAMP)

# CANN's msaccucmp (PyPI mindstudio-probe) is an oracle for tests and benchmarks (tests/msaccucmp_oracle.py,
# bench/npu.py), never an nbprec dependency. It is installed without its dependencies because only its
# pure-Python msaccucmp files are loaded (by path; msprobe itself is never imported).
ORACLE := $(VENV)/.installed-oracle-mindstudio-probe

$(ORACLE): $(STAMP)
	$(BIN)/python -m pip install --disable-pip-version-check --no-deps -q "mindstudio-probe==26.2.0"
	@touch $(ORACLE)

# The widget JavaScript offline reports inline comes from the npm registry. Without npm (or the registry) demo and
# test carry on: reports show static tables and plots, and the tests that need the JavaScript skip.
FETCH_ASSETS = $(BIN)/nbprec report --fetch-assets || echo "note: report JavaScript not fetched (needs npm); \
reports show static tables and plots, and the tests that need it skip"

demo: install
	@$(FETCH_ASSETS)
	$(BIN)/nbprec demo --out $(DEMO_OUT) $(if $(MODEL),--model $(MODEL),) --report

# The widget JavaScript offline reports inline (html-manager embed bundle, require.js), fetched from the npm
# registry into the virtualenv (never committed). Without it reports fall back to static tables and plots.
report-assets: install
	$(BIN)/nbprec report --fetch-assets

# The JupyterLab extension (docs/jupyter.md): TypeScript in jupyterlab-nbprec/, built with @jupyterlab/builder into
# nbprec/labextension/, which is committed and installed with nbprec (setup.py), so users need no build step.
# npm installs the locked packages from the npm registry only (jupyterlab-nbprec/.npmrc, package-lock.json).
# labextension rebuilds the shipped files; check-labextension (CI: .ci/run) builds a copy in build/ and checks
# that it matches them (jupyterlab-nbprec/check_build.py says what is compared).
LABEXT := jupyterlab-nbprec
NPM_CI := $(LABEXT)/node_modules/.package-lock.json

$(NPM_CI): $(LABEXT)/package.json $(LABEXT)/package-lock.json
	cd $(LABEXT) && npm ci --no-audit --no-fund

labextension: install $(NPM_CI)
	cd $(LABEXT) && PATH="$(abspath $(BIN)):$$PATH" npm run build

check-labextension: install $(NPM_CI)
	$(BIN)/python $(LABEXT)/check_build.py

test: install $(ORACLE)
	@$(FETCH_ASSETS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install $(ORACLE)
	$(BIN)/python bench/open_index.py
	$(BIN)/python bench/compare.py
	$(BIN)/python bench/npu.py

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache .ruff_cache build dist $(LABEXT)/node_modules $(LABEXT)/lib
