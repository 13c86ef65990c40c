# latentd: one Makefile for the engine library, the `latent` CLI, the daemon,
# the load client and every test. `make run` serves the default model;
# `make test` builds and runs every test, sanitizer builds included.

CC      ?= cc
PYTHON  ?= /usr/bin/python3
SANITIZER ?=

# Debian packages the build needs; `make` installs missing ones when root.
DEB_BUILD := libmicrohttpd-dev libjansson-dev libopenblas-dev libuv1-dev libcurl4-openssl-dev pkg-config
# ...and the tests (numpy for the independent reference, node for real clients;
# node and npm count as present whatever package brought them).
DEB_TEST  := python3 python3-numpy curl

ifeq ($(SANITIZER),)
BUILD   := build
SANFLAGS :=
else ifeq ($(SANITIZER),address)
BUILD   := build/asan
SANFLAGS := -fsanitize=address -fno-omit-frame-pointer
else ifeq ($(SANITIZER),undefined)
BUILD   := build/ubsan
SANFLAGS := -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else
$(error SANITIZER must be address or undefined)
endif

PKGS_ENGINE := jansson openblas
PKGS_SERVER := jansson openblas libmicrohttpd libuv
# Recursive (=) so pkg-config runs after the deps step has installed things.
# The x86-64 baseline: kernels for newer instruction sets carry their own
# target attributes and are chosen at run time (engine/kernels/isa.c), so a
# binary built on one machine runs right on any other.
OPT      ?= -O2
CFLAGS_ALL = -std=gnu11 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -Iinclude -Iengine -MMD -MP -fopenmp-simd \
             $(SANFLAGS) $(shell pkg-config --cflags $(PKGS_ENGINE) 2>/dev/null) $(CFLAGS)
LIBS_ENGINE = $(shell pkg-config --libs $(PKGS_ENGINE) 2>/dev/null) -lm -lpthread
LDFLAGS_ALL = $(SANFLAGS) $(LDFLAGS)

ENGINE_SRC := $(wildcard engine/*.c engine/kernels/*.c engine/train/*.c)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/obj/%.o)
CLI_SRC    := $(wildcard engine/cli/*.c)
CLI_OBJ    := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_SUPPORT_OBJ := $(BUILD)/obj/tests/unit/ref_ops.o
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
ENGINE_LIB := $(BUILD)/libengine.a
DEPS_STAMP := build/.deps-$(shell echo $(DEB_BUILD) | md5sum | cut -c1-8)
TEST_STAMP := build/.testdeps-$(shell echo $(DEB_TEST) | md5sum | cut -c1-8)

# Keep object files of pattern chains (tests) instead of deleting them as intermediates.
.SECONDARY:

.PHONY: docs-settings all deps deps-node test-deps unit test test-unit test-integration test-sanitizers run clean bench fuzz

all: $(BUILD)/latent $(UNIT_BIN) $(BUILD)/latentd $(BUILD)/latent-bench

# Installs missing Debian packages when run as root; otherwise names the command.
define ensure_debs
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) || exit 1; \
	  else \
	    echo "missing packages:$$missing"; echo "run: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
endef

$(DEPS_STAMP):
	$(call ensure_debs,$(DEB_BUILD))
	@mkdir -p build && touch $@
$(TEST_STAMP): | $(DEPS_STAMP)
	$(call ensure_debs,$(DEB_TEST))
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  $(MAKE) --no-print-directory DEB_BUILD="nodejs npm" deps-node; fi
	@mkdir -p build && touch $@
deps: $(DEPS_STAMP)
deps-node:
	$(call ensure_debs,$(DEB_BUILD))
test-deps: $(TEST_STAMP)

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(ENGINE_LIB): $(ENGINE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/latent: $(CLI_OBJ) $(ENGINE_LIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_ENGINE)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(UNIT_SUPPORT_OBJ) $(ENGINE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_ENGINE)

unit: $(UNIT_BIN)

# Unit tests of this build (plain or sanitizer).
test-unit: $(UNIT_BIN) $(BUILD)/latent | $(TEST_STAMP)
	@tests/run_tests.sh unit $(BUILD)

# Tests that drive the binaries: reference logits, tokenizer vs gpt-3-encoder,
# loader rejections, CLI behaviour.
test-integration: all | $(TEST_STAMP)
	@tests/run_tests.sh integration $(BUILD)

test-sanitizers:
	$(MAKE) --no-print-directory SANITIZER=address test-unit
	$(MAKE) --no-print-directory SANITIZER=undefined test-unit

# Everything: plain unit tests, the same under ASan and UBSan, then integration.
test: all | $(TEST_STAMP)
	@$(MAKE) --no-print-directory SANITIZER=address unit
	@$(MAKE) --no-print-directory SANITIZER=undefined unit
	@tests/run_tests.sh all $(BUILD)

# ---- the daemon (latentd), its load client (latent-bench), the request fuzzer ----
SERVER_SRC  := $(wildcard server/*.c)
SERVER_OBJ  := $(SERVER_SRC:%.c=$(BUILD)/obj/%.o)
CFLAGS_SERVER = $(shell pkg-config --cflags libmicrohttpd libuv jansson 2>/dev/null)
LIBS_SERVER   = $(shell pkg-config --libs libmicrohttpd libuv jansson 2>/dev/null)
LIBS_BENCH    = $(shell pkg-config --libs libcurl 2>/dev/null) -lm -lpthread
FUZZ_SRC    := tests/fuzz/fuzz_request.c server/openai_request.c server/chat_template.c server/errors.c \
               server/buf.c server/textstream.c engine/sampler.c engine/rng.c engine/error.c engine/tokenizer.c engine/unicode_tables.c

$(BUILD)/obj/server/%.o: server/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(CFLAGS_SERVER) -c $< -o $@

$(BUILD)/latentd: $(SERVER_OBJ) $(ENGINE_LIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_SERVER) $(LIBS_ENGINE)

$(BUILD)/latent-bench: $(BUILD)/obj/clients/latent-bench.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_BENCH)

# libFuzzer target for the request parser/validator (clang; run by tests/integration/server_fuzz.sh).
build/fuzz/fuzz_request: $(FUZZ_SRC) $(wildcard server/*.h) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude -Iengine -Iserver \
	    $(shell pkg-config --cflags jansson 2>/dev/null) -o $@ $(FUZZ_SRC) $(shell pkg-config --libs jansson 2>/dev/null) -lm -lpthread
fuzz: build/fuzz/fuzz_request

# Rewrites docs/deployment.md's table of every latentd setting from the binary.
docs-settings: $(BUILD)/latentd
	@{ sed '/<!-- settings:end -->/,$$d; /<!-- settings:begin -->/q' docs/deployment.md; \
	   tests/settings_markdown.sh $(BUILD)/latentd; echo '<!-- settings:end -->'; \
	   sed '1,/<!-- settings:end -->/d' docs/deployment.md; } > docs/deployment.md.new && mv docs/deployment.md.new docs/deployment.md

bench: all
	$(BUILD)/latent bench

# Serves models/default on 127.0.0.1:8080 (a small random T2MLR model is
# written there first if the directory has no model yet).
run: all | $(TEST_STAMP)
	@tests/make_test_model.sh models/default t2mlr
	$(BUILD)/latentd --model models/default --host 127.0.0.1 --port 8080

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)

# Training step speed on the standard small model (docs/training.md).
.PHONY: bench-train
bench-train: $(BUILD)/latent
	$(BUILD)/latent train --bench
