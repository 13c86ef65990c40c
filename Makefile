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
# ...and the operations tests: man pages (man-db, groff-base, mandoc), units
# (systemd: systemd-analyze, systemd-socket-activate), nginx in front (nginx, openssl).
DEB_TEST  += man-db groff-base mandoc systemd nginx openssl
# ...and the fuzz targets (tests/integration/fuzz.sh): clang with libFuzzer's runtime.
DEB_TEST  += clang libclang-rt-dev
# ...and data-parallel training (tests/integration/train_mpi.sh): OpenMPI's
# mpicc for the plugin and mpirun. Not a build dependency: `latent` never
# links MPI; build/latent-mpi.so is built wherever mpicc is (`make mpi`
# installs it), and `latent train` loads it only when mpirun started it.
DEB_MPI   := libopenmpi-dev openmpi-bin
DEB_TEST  += $(DEB_MPI)

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

.PHONY: experiment experiment-state experiment-long experiment-var bench-onednn docs-settings all deps deps-node test-deps unit test test-unit test-integration test-sanitizers run clean bench fuzz mpi

# The MPI plugin joins `all` where OpenMPI's compiler wrapper is installed.
MPICC ?= mpicc
MPI_PLUGIN := $(if $(shell command -v $(MPICC) 2>/dev/null),$(BUILD)/latent-mpi.so)

all: $(BUILD)/latent $(UNIT_BIN) $(BUILD)/latentd $(BUILD)/latent-bench $(MPI_PLUGIN)

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

# Data-parallel training's MPI calls (engine/mpi/), loaded by `latent train`
# under mpirun only. Built without the sanitizers: it is OpenMPI's code that
# runs there, and it must load into any build of latent.
$(BUILD)/latent-mpi.so: engine/mpi/latent_mpi.c engine/mpi/train_dist_ops.h
	@mkdir -p $(dir $@)
	$(MPICC) -std=gnu11 -O2 -g -Wall -Wextra -shared -fPIC -o $@ $<
mpi:
	$(call ensure_debs,$(DEB_MPI))
	$(MAKE) --no-print-directory all $(BUILD)/latent-mpi.so

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(UNIT_SUPPORT_OBJ) $(ENGINE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter-out $(ENGINE_LIB),$^) $(ENGINE_LIB) $(LIBS_ENGINE)

unit: $(UNIT_BIN)

# Unit tests of this build (plain or sanitizer).
test-unit: $(UNIT_BIN) $(BUILD)/latent | $(TEST_STAMP)
	@tests/run_tests.sh unit $(BUILD)

# Tests that drive the binaries: reference logits, tokenizer vs gpt-3-encoder,
# loader rejections, CLI behaviour.
test-integration: all | $(TEST_STAMP)
	@$(MAKE) --no-print-directory $(BUILD)/latent-mpi.so
	@tests/run_tests.sh integration $(BUILD)

test-sanitizers:
	$(MAKE) --no-print-directory SANITIZER=address test-unit
	$(MAKE) --no-print-directory SANITIZER=undefined test-unit

# Everything: plain unit tests, the same under ASan and UBSan, then integration.
test: all | $(TEST_STAMP)
	@$(MAKE) --no-print-directory $(BUILD)/latent-mpi.so # mpicc came with the test packages
	@$(MAKE) --no-print-directory SANITIZER=address unit build/asan/latent
	@$(MAKE) --no-print-directory SANITIZER=undefined unit build/ubsan/latent
	@tests/run_tests.sh all $(BUILD)

# ---- the daemon (latentd) and its load client (latent-bench) ----
SERVER_SRC  := $(wildcard server/*.c)
SERVER_OBJ  := $(SERVER_SRC:%.c=$(BUILD)/obj/%.o)
CFLAGS_SERVER = $(shell pkg-config --cflags libmicrohttpd libuv jansson 2>/dev/null)
LIBS_SERVER   = $(shell pkg-config --libs libmicrohttpd libuv jansson 2>/dev/null)
LIBS_BENCH    = $(shell pkg-config --libs libcurl 2>/dev/null) -lm -lpthread

$(BUILD)/obj/server/%.o: server/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(CFLAGS_SERVER) -c $< -o $@

$(BUILD)/latentd: $(SERVER_OBJ) $(ENGINE_LIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_SERVER) $(LIBS_ENGINE)

$(BUILD)/latent-bench: $(BUILD)/obj/clients/latent-bench.o $(BUILD)/obj/clients/bench_stats.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_BENCH)
# latent-bench's percentiles and bootstrap interval, unit-tested on their own.
$(BUILD)/tests/test_bench_stats: $(BUILD)/obj/clients/bench_stats.o
# The daemon's parts that need neither MHD nor libuv, unit-tested on their own.
$(BUILD)/tests/test_srv_guard: $(BUILD)/obj/server/http_guard.o
$(BUILD)/tests/test_srv_text: $(BUILD)/obj/server/textstream.o $(BUILD)/obj/server/buf.o
$(BUILD)/tests/test_srv_prefix_cache: $(BUILD)/obj/server/prefix_cache.o
$(BUILD)/tests/test_srv_sched: $(BUILD)/obj/server/scheduler.o $(BUILD)/obj/server/prefix_cache.o \
    $(BUILD)/obj/server/session.o $(BUILD)/obj/server/log.o

# ---- libFuzzer targets (clang, ASan + UBSan), tests/fuzz/fuzz_*.c: the request
# parser/validator, the tokenizer, safetensors + the model loader, config.json.
# `make fuzz FUZZ_SECONDS=N` builds and runs each for N seconds from its seed
# corpus tests/fuzz/corpus_<name> (tests/integration/fuzz.sh; `make test` runs it
# with 20 s each).
FUZZ_SECONDS ?= 20
FUZZ_NAMES   := request tokenizer safetensors config json_schema
FUZZ_BIN     := $(FUZZ_NAMES:%=build/fuzz/fuzz_%)
FUZZ_SRC_request     := tests/fuzz/fuzz_request.c server/openai_request.c server/chat_template.c server/errors.c server/response_format.c \
                        engine/json_schema.c engine/json_grammar.c \
                        server/buf.c server/textstream.c engine/sampler.c engine/rng.c engine/error.c engine/tokenizer.c engine/unicode_tables.c
FUZZ_SRC_tokenizer   := tests/fuzz/fuzz_tokenizer.c engine/tokenizer.c engine/unicode_tables.c engine/error.c
FUZZ_SRC_safetensors := tests/fuzz/fuzz_safetensors.c engine/safetensors.c engine/model_load.c engine/weights.c \
                        engine/config.c engine/file_atomic.c engine/error.c engine/tokenizer.c engine/unicode_tables.c
FUZZ_SRC_json_schema := tests/fuzz/fuzz_json_schema.c engine/json_schema.c engine/json_grammar.c engine/json_pda.c engine/token_mask.c \
                        engine/tokenizer.c engine/unicode_tables.c engine/error.c
FUZZ_SRC_config      := tests/fuzz/fuzz_config.c engine/config.c engine/file_atomic.c engine/weights.c engine/safetensors.c engine/error.c
define FUZZ_LINK
@mkdir -p $(dir $@)
clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude -Iengine -Iserver \
    $(shell pkg-config --cflags jansson 2>/dev/null) -o $@ $(filter %.c,$^) $(shell pkg-config --libs jansson 2>/dev/null) -lm -lpthread
endef

build/fuzz/fuzz_request: $(FUZZ_SRC_request) $(wildcard server/*.h include/latent/*.h) | $(TEST_STAMP)
	$(FUZZ_LINK)
build/fuzz/fuzz_tokenizer: $(FUZZ_SRC_tokenizer) $(wildcard include/latent/*.h engine/*.h tests/fuzz/*.h) | $(TEST_STAMP)
	$(FUZZ_LINK)
build/fuzz/fuzz_safetensors: $(FUZZ_SRC_safetensors) $(wildcard include/latent/*.h engine/*.h tests/fuzz/*.h) | $(TEST_STAMP)
	$(FUZZ_LINK)
build/fuzz/fuzz_json_schema: $(FUZZ_SRC_json_schema) $(wildcard include/latent/*.h engine/*.h) | $(TEST_STAMP)
	$(FUZZ_LINK)
build/fuzz/fuzz_config: $(FUZZ_SRC_config) $(wildcard include/latent/*.h engine/*.h tests/fuzz/*.h) | $(TEST_STAMP)
	$(FUZZ_LINK)
fuzz: $(FUZZ_BIN)
	@LATENT_ROOT=$(CURDIR) LATENT_FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/integration/fuzz.sh

# Rewrites docs/deployment.md's table of every latentd setting from the binary.
docs-settings: $(BUILD)/latentd
	@{ sed '/<!-- settings:end -->/,$$d; /<!-- settings:begin -->/q' docs/deployment.md; \
	   tests/settings_markdown.sh $(BUILD)/latentd; echo '<!-- settings:end -->'; \
	   sed '1,/<!-- settings:end -->/d' docs/deployment.md; } > docs/deployment.md.new && mv docs/deployment.md.new docs/deployment.md

# oneDNN's bf16 matmul against the engine's kernel (docs/architecture.md):
# a measurement only, so libdnnl-dev is installed here and nowhere else.
$(BUILD)/onednn_compare: tests/bench/onednn_compare.c $(ENGINE_LIB)
	$(call ensure_debs,libdnnl-dev)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(ENGINE_LIB) -ldnnl $(LIBS_ENGINE)
# Twice: oneDNN's OpenMP threads spin after each call and take cores from
# the engine's pool (its figures then fall to one thread's); with
# OMP_WAIT_POLICY=passive they sleep, and oneDNN's small products lose the
# spin instead (docs/benchmarks.md, "AMX, second pass on the Xeon").
bench-onednn: $(BUILD)/onednn_compare
	@echo "== OMP_WAIT_POLICY as set ($${OMP_WAIT_POLICY:-unset})"
	$(BUILD)/onednn_compare
	@echo "== OMP_WAIT_POLICY=passive"
	OMP_WAIT_POLICY=passive $(BUILD)/onednn_compare

bench: all
	$(BUILD)/latent bench

# The evidence that latent recurrence pays (docs/experiments.md): trains
# plain, T2MLR (fixed and adaptive Jacobi) and LRT on parity, S3, S5 and
# variable assignment, and plain and T2MLR on S3 again with seeds 2-5;
# writes the tables into docs/experiments.md, the plots and models/s3.
# QUICK=1: a few minutes, report under build/experiment-quick; SEED=N: a
# replicate, report under build/experiment-seedN.
experiment: $(BUILD)/latent
	QUICK=$(QUICK) LATENT=$(BUILD)/latent bash models/experiment.sh

# Issue 24: S5 (length curriculum) and variable assignment (a shared lookup run,
# then the depth curriculum),
# plain and T2MLR on seeds 11-13, 20 minutes of training per model on one core,
# one run at a time (JOBS=2 for two); learning curves and tables in
# build/experiment-state/report (docs/experiments.md, "State tracking").
# STATE_TASKS=, STATE_MODELS=, STATE_SEEDS=, STATE_BUDGET= narrow it; QUICK=1 smoke.
experiment-state: $(BUILD)/latent
	STATE=1 JOBS=$(or $(JOBS),1) QUICK=$(QUICK) LATENT=$(BUILD)/latent bash models/experiment.sh

# The long recipe (issue 24): the state recipe of one seed (S5, T2MLR, seed
# 12 unless STATE_TASKS/STATE_MODELS/STATE_SEEDS say otherwise), its final
# stage run on until the task's target is met or 2 hours of CPU are spent;
# NP=N runs every chunk under `mpirun -np N` (the same batches; N cores).
# STATE_TASKS=var takes var's long recipe: one query a record, long stage
# caps, no cool-down, decoy chains once |gamma_rec| reaches 0.5 (the sixteenth
# session of docs/experiments.md; each STATE_VAR_ setting can be overridden).
# Stopped, it continues where it stopped. Report in build/experiment-long/report.
experiment-long: $(BUILD)/latent
	STATE=1 JOBS=1 QUICK=$(QUICK) LATENT=$(BUILD)/latent WORK=$(or $(WORK),build/experiment-long) \
	STATE_TASKS="$(or $(STATE_TASKS),s5)" STATE_MODELS="$(or $(STATE_MODELS),t2mlr)" \
	STATE_SEEDS="$(or $(STATE_SEEDS),12)" STATE_BUDGET=$(or $(STATE_BUDGET),7200) STATE_UNTIL_TARGET=1 \
	STATE_VAR_QUERIES=$(or $(STATE_VAR_QUERIES),1) STATE_VAR_DECOY=$(or $(STATE_VAR_DECOY),100) \
	STATE_VAR_DECOY_GAMMA=$(or $(STATE_VAR_DECOY_GAMMA),0.5) \
	STATE_VAR_STAGE_CPU="$(or $(STATE_VAR_STAGE_CPU),300 3300 4300 5300)" \
	STATE_VAR_COOL_AFTER=$(or $(STATE_VAR_COOL_AFTER),1000000000) \
	NP=$(or $(NP),1) bash models/experiment.sh

# Issue 24's variable-assignment recipe, every cap in steps so that any CPU
# runs it alike (docs/experiments.md, "The twentieth session"): the shared
# lookup run to L8 0.75 or step 67,000, then depth stages 1-5 with one query
# a record and decoy chains once |gamma_rec| reaches 0.5, stages capped at
# 2000/30000/36000/42000 steps after the lookup's end, a cool-down from 50000,
# each run until depth 5 meets the target or 7200 CPU s; T2MLR then plain
# (on T2MLR's schedule) for seeds 11, 12, 13, one run at a time: about 6
# hours on 2 cores. Seeds 11 and 13 meet the target (AMD EPYC Zen 5, f32).
# Stopped, it continues where it stopped. Report in build/experiment-var/report.
experiment-var: $(BUILD)/latent
	STATE=1 JOBS=$(or $(JOBS),1) LATENT=$(BUILD)/latent WORK=$(or $(WORK),build/experiment-var) \
	STATE_TASKS=var STATE_MODELS="$(or $(STATE_MODELS),t2mlr plain)" STATE_SEEDS="$(or $(STATE_SEEDS),11 12 13)" \
	STATE_BUDGET=$(or $(STATE_BUDGET),7200) STATE_UNTIL_TARGET=1 \
	STATE_VAR_LOOKUP_TARGET=0.75 STATE_VAR_LOOKUP_STEPS=67000 STATE_VAR_LOOKUP_L2_STEPS=30000 STATE_VAR_LOOKUP_BUDGET=100000 \
	STATE_VAR_QUERIES=1 STATE_VAR_DECOY=100 STATE_VAR_DECOY_GAMMA=0.5 \
	STATE_VAR_STAGE_STEPS="2000 30000 36000 42000" STATE_VAR_COOL_AFTER_STEPS=50000 \
	NP=$(or $(NP),1) bash models/experiment.sh

# Serves models/default on 127.0.0.1:8080 (a small random T2MLR model is
# written there first if the directory has no model yet).
run: all | $(TEST_STAMP)
	@tests/make_test_model.sh models/default t2mlr
	$(BUILD)/latentd --model models/default --host 127.0.0.1 --port 8080

clean:
	rm -rf build

# ---- make install / uninstall --------------------------------------------------------
# `make install [PREFIX=/usr/local] [DESTDIR=staging dir]`: latent and latent-bench
# to $(BINDIR), latentd to $(SBINDIR), the systemd units to $(UNITDIR), the
# config to $(SYSCONFDIR)/latentd (kept if one is there), docs and the nginx
# examples to $(DOCDIR), man pages to $(MANDIR). The units and man pages are
# written for PREFIX=/usr/local; sed gives them this PREFIX's paths.
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
SYSCONFDIR ?= /etc
DOCDIR     ?= $(PREFIX)/share/doc/latentd
# the MPI plugin (latent train under mpirun finds it from BINDIR/../lib/latentd)
PKGLIBDIR  ?= $(PREFIX)/lib/latentd
MANDIR     ?= $(PREFIX)/share/man
UNITDIR    ?= $(PREFIX)/lib/systemd/system
INSTALL    ?= install
INST_DOCS  := README.md $(wildcard docs/*.md)
INST_UNITS := systemd/latentd.service systemd/latentd.socket
INST_MAN   := docs/man/latent.1 docs/man/latentd.conf.5 docs/man/latentd.8
INST_SED   = -e 's|/usr/local/sbin/latentd|$(SBINDIR)/latentd|g' -e 's|/usr/local/share/doc/latentd|$(DOCDIR)|g' \
             -e 's|/usr/local/lib/systemd/system|$(UNITDIR)|g' -e 's|/etc/latentd/latentd.conf|$(SYSCONFDIR)/latentd/latentd.conf|g'
.PHONY: install uninstall

install: all
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/latentd \
	    $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	$(INSTALL) -m 755 $(BUILD)/latent $(BUILD)/latent-bench $(DESTDIR)$(BINDIR)/
	$(if $(MPI_PLUGIN),$(INSTALL) -d $(DESTDIR)$(PKGLIBDIR) && $(INSTALL) -m 644 $(MPI_PLUGIN) $(DESTDIR)$(PKGLIBDIR)/)
	$(INSTALL) -m 755 $(BUILD)/latentd $(DESTDIR)$(SBINDIR)/
	for f in $(INST_UNITS); do sed $(INST_SED) $$f > $(DESTDIR)$(UNITDIR)/$${f##*/} && chmod 644 $(DESTDIR)$(UNITDIR)/$${f##*/} || exit 1; done
	for f in $(INST_MAN); do d=$(DESTDIR)$(MANDIR)/man$${f##*.}/$${f##*/}; sed $(INST_SED) $$f > $$d && chmod 644 $$d || exit 1; done
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/latentd/latentd.conf ]; then \
	    echo "keeping $(DESTDIR)$(SYSCONFDIR)/latentd/latentd.conf (the shipped one is $(DOCDIR)/examples/latentd.conf)"; \
	else echo "$(INSTALL) -m 644 etc/latentd.conf $(DESTDIR)$(SYSCONFDIR)/latentd/"; \
	    $(INSTALL) -m 644 etc/latentd.conf $(DESTDIR)$(SYSCONFDIR)/latentd/; fi
	$(INSTALL) -m 644 $(INST_DOCS) $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 644 etc/latentd.conf etc/nginx-latentd.conf etc/nginx-latentd-scaleout.conf $(DESTDIR)$(DOCDIR)/examples/

# Removes what install wrote; the config only when it is unchanged.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/latent $(DESTDIR)$(BINDIR)/latent-bench $(DESTDIR)$(SBINDIR)/latentd
	rm -f $(DESTDIR)$(PKGLIBDIR)/latent-mpi.so
	@rmdir $(DESTDIR)$(PKGLIBDIR) 2>/dev/null || true
	rm -f $(INST_UNITS:systemd/%=$(DESTDIR)$(UNITDIR)/%)
	rm -f $(DESTDIR)$(MANDIR)/man1/latent.1 $(DESTDIR)$(MANDIR)/man5/latentd.conf.5 $(DESTDIR)$(MANDIR)/man8/latentd.8
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(INST_DOCS)) examples/latentd.conf examples/nginx-latentd.conf \
	    examples/nginx-latentd-scaleout.conf)
	@rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	@c=$(DESTDIR)$(SYSCONFDIR)/latentd/latentd.conf; \
	if [ -e $$c ] && ! cmp -s $$c etc/latentd.conf; then echo "keeping $$c (changed)"; \
	else rm -f $$c; rmdir $(DESTDIR)$(SYSCONFDIR)/latentd 2>/dev/null || true; fi

-include $(shell find build -name '*.d' 2>/dev/null)

# Training step speed on the standard small model (docs/training.md).
.PHONY: bench-train
bench-train: $(BUILD)/latent
	$(BUILD)/latent train --bench
