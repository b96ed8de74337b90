# kthrottle build. All output goes to build/ (ignored).
#   make            daemon, CLI, BPF objects
#   make test       everything, then the whole suite (root)
#   make unit       host unit tests only (no root needed)
#   make bench      benchmark table (BPF incl. XDP), store simulation, query server, strict spacing, fault table, pod churn soak (root; SOAK_S=600)
#   make fuzz       run every libFuzzer target FUZZ_SECONDS (300) each
#   make kernels    Debian's cloud kernels (6.1, bookworm-backports) under QEMU, the BPF and traffic tests in each (root)
#   make install-python PYTHON=<venv>/bin/python   the Python module, offline
#   make SAN=1 ...  build userspace with AddressSanitizer + UBSan
#   make V=1 ...    show the full commands
#   make clean

BUILD     ?= build
CLANG     ?= clang
CC        ?= cc
BPFTOOL   ?= bpftool
V         ?= 0
ifeq ($(V),0)
Q         := @
msg        = @printf '  %-8s %s\n' $(1) $(2);
else
Q         :=
msg        =
endif
ARCH      := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')

# user/ by subsystem: base (config, cgroups, logging), kube (the pods on this
# node: selector, cgroup paths, API watch), members (the plan: member cgroups
# resolved from paths, patterns and pod selectors, pending directories),
# kernel (loader, apply, bucket writes, classifier, inspection), store (the
# Redis client: connections, transports, operations, Lua scripts, worker
# threads), pool (agreement over the store; policy.h is what kernel takes
# from it), control
# (ramp, controller, daemon loop), tags (tag limits: query server, tag
# buckets, XDP, exchange), bin (the two programs). Includes name their
# layer ("kernel/apply.h"), from -Iuser.
USER_DIRS := user/base user/kube user/members user/kernel user/store user/pool user/control user/tags

CFLAGS    ?= -O2 -g
CFLAGS    += -std=gnu11 -Wall -Wextra -Werror -Wno-missing-field-initializers -Wno-format-truncation \
             -Iinclude -Iuser -I$(BUILD)/skel -I$(BUILD)/gen -D_GNU_SOURCE
LDLIBS    += -lbpf -lelf -lz -lyaml -lhiredis -lcurl -ljson-c -lssl -lcrypto -lpthread -lm
# each object (and test binary) depends on the headers it includes, as the
# compiler found them (-MMD; -MP: a header since removed is no error)
DEPFLAGS   = -MMD -MP
ifeq ($(SAN),1)
CFLAGS    += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS   += -fsanitize=address,undefined
endif

BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Wall -Werror \
              -Iinclude -Ibpf -I$(BUILD)

BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/%.bpf.o,$(BPF_SRCS))
SKELS     := $(patsubst bpf/%.bpf.c,$(BUILD)/skel/%.skel.h,$(BPF_SRCS))

MAINS     := user/bin/kthrottled.c user/bin/kthrottlectl.c
LIB_SRCS  := $(wildcard $(addsuffix /*.c,$(USER_DIRS)))
LIB_OBJS  := $(patsubst user/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
HDRS      := $(wildcard include/*.h include/kthrottle/*.h $(addsuffix /*.h,$(USER_DIRS)))

TEST_SRCS := $(wildcard tests/unit/test_*.c tests/bpf/test_*.c tests/e2e/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
TEST_HELPERS := $(patsubst tests/%.c,$(BUILD)/obj/tests/%.o,$(wildcard tests/lib/*.c))
TOOLS_SRCS := $(wildcard tests/tools/*.c)
TOOLS_BINS := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(TOOLS_SRCS))
# the tools the suites run (the benchmarks' own tools are built by bench)
TEST_TOOLS := $(filter-out %/kt-libbench %/kt-querybench,$(TOOLS_BINS))

# Fuzzing: every tests/fuzz/fuzz_<name>.c defines LLVMFuzzerTestOneInput and
# has its seed corpus in tests/fuzz/corpus/<name>/ (and optionally a
# dictionary tests/fuzz/fuzz_<name>.dict). The user/ library is compiled again
# with clang and the sanitizers into its own object dir and archived, so each
# target links only the objects it uses. `make test` runs each target briefly
# (scripts/run-tests.sh -> scripts/fuzz.sh); `make fuzz` runs them long and
# keeps what they find in $(BUILD)/fuzz/corpus/<name>/.
FUZZ_SECONDS ?= 300
FUZZ_TEST_SECONDS ?= 2
FUZZ_CC    := $(CLANG)
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -O1 -g -std=gnu11 -Wall -Wextra -Werror -Wno-missing-field-initializers \
	       -Iinclude -Iuser -I$(BUILD)/skel -I$(BUILD)/gen -D_GNU_SOURCE $(FUZZ_SAN)
FUZZ_SRCS  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
# the fuzzers' targets and what they call: base/ and the three parsers,
# instrumented (not every layer: make test builds these too)
FUZZ_LIB_SRCS := $(wildcard user/base/*.c) user/control/ctlproto.c user/control/metrics.c \
		 user/tags/qline.c
FUZZ_OBJS  := $(patsubst user/%.c,$(BUILD)/fuzz/obj/%.o,$(FUZZ_LIB_SRCS))
FUZZ_LIB   := $(BUILD)/fuzz/libkt-fuzz.a

.PHONY: all test unit bench clean deps deps-demo demo fuzz fuzz-build install uninstall install-python
# a recipe that fails leaves no half-written target behind for the next make
.DELETE_ON_ERROR:
all: $(BUILD)/kthrottled $(BUILD)/kthrottlectl

# the Debian packages (scripts/deps.txt): deps-demo what make all and make
# demo need, deps everything (tests, bench, fuzz)
deps:
	scripts/setup.sh test

deps-demo:
	scripts/setup.sh demo

$(BUILD)/vmlinux.h:
	@mkdir -p $(@D)
	@test -r /sys/kernel/btf/vmlinux || { echo "error: /sys/kernel/btf/vmlinux missing: kernel built without BTF" >&2; exit 1; }
	$(call msg,GEN,$@)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

$(BUILD)/bpf/%.bpf.o: bpf/%.bpf.c $(wildcard bpf/*.bpf.h bpf/lib/*.h include/kthrottle/*.h) include/kthrottle.h $(BUILD)/vmlinux.h
	@mkdir -p $(@D)
	$(call msg,BPF,$@)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/skel/%.skel.h: $(BUILD)/bpf/%.bpf.o
	@mkdir -p $(@D)
	$(call msg,SKEL,$@)$(BPFTOOL) gen skeleton $< name kt_$(subst -,_,$*) > $@.tmp && mv $@.tmp $@

# The store's Redis Lua scripts, user/store/lua/*.lua, become the string
# macros of $(BUILD)/gen/kt_lua.h (comments dropped, common.lua included
# where a script says so); the same texts go to $(BUILD)/lua/ for
# redis-cli --eval. Only store_redis.c includes the header.
LUA_SRCS  := $(wildcard user/store/lua/*.lua)
LUA_H     := $(BUILD)/gen/kt_lua.h

$(LUA_H): scripts/lua-embed.sh $(LUA_SRCS)
	$(call msg,GEN,$@)sh scripts/lua-embed.sh $@ $(BUILD)/lua $(LUA_SRCS)

$(BUILD)/obj/store/store_redis.o $(BUILD)/fuzz/obj/store/store_redis.o: $(LUA_H)

# the skeletons and generated headers exist before anything compiles; after
# that each object's .d says which of them (and of the headers) it needs
GEN_HDRS  := $(SKELS) $(LUA_H)

$(BUILD)/obj/%.o: user/%.c | $(GEN_HDRS)
	@mkdir -p $(@D)
	$(call msg,CC,$@)$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c | $(GEN_HDRS)
	@mkdir -p $(@D)
	$(call msg,CC,$@)$(CC) $(CFLAGS) $(DEPFLAGS) -Itests/lib -c $< -o $@

$(BUILD)/kthrottled: $(BUILD)/obj/bin/kthrottled.o $(LIB_OBJS)
	$(call msg,LD,$@)$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# kthrottlectl check asks through libkthrottle's tag query client (the
# archive: only tagquery.o and what it uses are linked in)
$(BUILD)/kthrottlectl: $(BUILD)/obj/bin/kthrottlectl.o $(LIB_OBJS) $(BUILD)/libkthrottle.a
	$(call msg,LD,$@)$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(LIB_OBJS) $(TEST_HELPERS) | $(GEN_HDRS)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) $(DEPFLAGS) -MF $@.d -MT $@ -Itests/lib $(LDFLAGS) $< $(LIB_OBJS) $(TEST_HELPERS) -o $@ $(LDLIBS) -lcmocka

$(BUILD)/tools/%: tests/tools/%.c $(HDRS)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) $(LDFLAGS) $< -o $@ $(LDLIBS)

# the fake Kubernetes API server is libmicrohttpd (the daemon serves HTTP itself)
$(BUILD)/tools/kt-fakekube: tests/tools/kt-fakekube.c $(HDRS)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) $(LDFLAGS) $< -o $@ $(LDLIBS) -lmicrohttpd

# kt-storesim drives the real store code against a redis-server of its own
$(BUILD)/tools/kt-storesim: tests/tools/kt-storesim.c $(LIB_OBJS) $(TEST_HELPERS) $(HDRS) $(wildcard tests/lib/*.h)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) -Itests/lib $(LDFLAGS) $< $(LIB_OBJS) $(TEST_HELPERS) -o $@ $(LDLIBS) -lcmocka

# kt-querybench runs the query server (user/tags/query.c) in-process
$(BUILD)/tools/kt-querybench: tests/tools/kt-querybench.c $(LIB_OBJS) $(HDRS)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

# libkthrottle, the client library (include/kthrottle_client.h): position-
# independent, only the kthrottle_* API exported. Its test, benchmark and
# example link the static archive or the shared library.
KTLIB_SRCS := $(wildcard libkthrottle/*.c)
KTLIB_OBJS := $(patsubst libkthrottle/%.c,$(BUILD)/obj/libkthrottle/%.o,$(KTLIB_SRCS))
KTLIB_HDRS := include/kthrottle.h $(wildcard include/kthrottle/*.h) include/kthrottle_client.h $(wildcard libkthrottle/*.h)
KTLIB      := $(BUILD)/libkthrottle.so $(BUILD)/libkthrottle.a

all: $(KTLIB) $(BUILD)/examples/libkthrottle_demo

# its headers as the compiler found them (-MMD), like every other object
$(BUILD)/obj/libkthrottle/%.o: libkthrottle/%.c | $(GEN_HDRS)
	@mkdir -p $(@D)
	$(call msg,CC,$@)$(CC) $(CFLAGS) $(DEPFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/libkthrottle.so: $(KTLIB_OBJS)
	$(call msg,LD,$@)$(CC) $(LDFLAGS) -shared -Wl,-soname,libkthrottle.so.0 $^ -o $@ -lbpf
	$(Q)ln -sf libkthrottle.so $(BUILD)/libkthrottle.so.0

$(BUILD)/libkthrottle.a: $(KTLIB_OBJS)
	$(call msg,AR,$@)rm -f $@ && ar rcs $@ $^

$(BUILD)/examples/libkthrottle_demo: examples/libkthrottle_demo.c $(BUILD)/libkthrottle.so $(KTLIB_HDRS)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) $(LDFLAGS) $< -o $@ -L$(BUILD) -lkthrottle -Wl,-rpath,'$$ORIGIN/..'

# The tests that link libkthrottle's archive, one rule: the library against
# in-test servers (test_libkthrottle; test_tagquery, the tag query client and
# the two things built on it, kthrottlectl check and the Python module's
# TagQuery), cooperative limits end to end (test_coop), kthrottle_connect
# against in-flight and connection limits (test_inflight,
# test_connect_refusal), and a strict cooperative limit on two nodes through
# the library and the Python module (test_strict_lib), and the callers of a
# cooperative limit, weighted and classed, on two nodes (test_coop_callers).
KTLIB_TESTS := $(addprefix $(BUILD)/tests/,unit/test_libkthrottle unit/test_tagquery e2e/test_coop \
	e2e/test_inflight e2e/test_connect_refusal e2e/test_strict_lib e2e/test_coop_callers)
$(KTLIB_TESTS): $(BUILD)/tests/%: tests/%.c $(BUILD)/libkthrottle.a $(LIB_OBJS) $(TEST_HELPERS) | $(GEN_HDRS)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) $(DEPFLAGS) -MF $@.d -MT $@ -Itests/lib -Ilibkthrottle $(LDFLAGS) $< $(TEST_HELPERS) $(BUILD)/libkthrottle.a $(LIB_OBJS) -o $@ $(LDLIBS) -lcmocka
$(BUILD)/tests/unit/test_tagquery: | $(BUILD)/kthrottlectl $(BUILD)/libkthrottle.so
# the Python module loads libkthrottle.so.0 with ctypes
$(BUILD)/tests/e2e/test_strict_lib $(BUILD)/tests/e2e/test_coop_callers: $(BUILD)/libkthrottle.so python/pyproject.toml \
	$(wildcard python/kthrottle/*.py) | $(BUILD)/kthrottled

# the Python module (python/) in a venv against a real daemon: it loads
# libkthrottle.so.0 with ctypes, so it needs the shared library, not the archive
$(BUILD)/tests/e2e/test_python: tests/e2e/test_python.c $(BUILD)/libkthrottle.so $(LIB_OBJS) $(TEST_HELPERS) \
		python/pyproject.toml $(wildcard python/kthrottle/*.py) | $(GEN_HDRS) $(BUILD)/kthrottled
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) $(DEPFLAGS) -MF $@.d -MT $@ -Itests/lib $(LDFLAGS) $< $(TEST_HELPERS) $(LIB_OBJS) -o $@ $(LDLIBS) -lcmocka

# The Python module into $(PYTHON)'s environment (a venv's python: Debian's
# system python refuses pip installs), offline: pip's isolated build takes
# setuptools and wheel from Debian's wheel directory, not from PyPI.
PYTHON    ?= python3
PY_WHEELS ?= /usr/share/python-wheels
install-python:
	$(PYTHON) -m pip install --no-index --find-links $(PY_WHEELS) ./python

# kt-libbench times the Redis round trip it is compared with (redis_proc)
$(BUILD)/tools/kt-libbench: tests/tools/kt-libbench.c $(BUILD)/libkthrottle.a $(LIB_OBJS) $(TEST_HELPERS) $(KTLIB_HDRS) $(wildcard tests/lib/*.h)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) -Itests/lib -Ilibkthrottle $(LDFLAGS) $< $(TEST_HELPERS) $(BUILD)/libkthrottle.a $(LIB_OBJS) -o $@ $(LDLIBS) -lcmocka

$(BUILD)/fuzz/obj/%.o: user/%.c | $(GEN_HDRS)
	@mkdir -p $(@D)
	$(call msg,FUZZCC,$@)$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	$(call msg,AR,$@)rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB) $(HDRS)
	$(call msg,FUZZLD,$@)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB) -o $@ $(LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: deps $(FUZZ_BINS)
	$(Q)rc=0; for f in $(FUZZ_BINS); do \
		scripts/fuzz.sh $$f $(FUZZ_SECONDS) $(BUILD)/fuzz/corpus/$${f##*/fuzz_} || rc=1; \
	done; exit $$rc

# test_manifests runs kthrottled --check on the shipped config
unit: all $(filter $(BUILD)/tests/unit/%,$(TEST_BINS))
	scripts/run-tests.sh $(filter $(BUILD)/tests/unit/%,$(TEST_BINS))

# the packages first, then the build on every core (JOBS), then the suite
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: deps
	$(MAKE) -j$(JOBS) all $(TEST_BINS) $(TEST_TOOLS) $(FUZZ_BINS)
	FUZZ_TEST_SECONDS=$(FUZZ_TEST_SECONDS) scripts/run-tests.sh $(TEST_BINS) $(FUZZ_BINS)

# SOAK_S: how long `make bench` churns pod cgroups (50/s) under load while
# watching the daemon's fds and memory (tests/e2e/test_podchurn.c); pods
# through the Kubernetes watcher churn for 30 s (tests/e2e/test_kubechurn.c).
# A store far away: the delay climbs 50 -> 500 ms one way and back, 5 s a
# step (tests/e2e/test_store_latency.c; make test runs 50 -> 300 -> 50).
# kt-storesim: 1,000 nodes x 10 members on one redis-server, equal, by
# demand, by weight (issue 43) and by weight with priority classes; its exit 1 (a
# missed target) is ignored so the tables after it still print. Then groupBy's
# scale: 1,000 groups on one node, 10,000 groups over 100 nodes (100 each),
# and the stress case of every node holding 1,000 of them, both lease modes
# (docs/benchmarks.md: member leases miss their targets; node leases agree
# after a start of about 20 s, a tenth of the fleet killed; 64 driver
# threads, so no node waits on another's heartbeat); with
# redisStore.leases: node beside member leases (100 nodes x 100 of 10,000
# and of 1,000), 1,000 nodes x 10 of 1,000 with node leases, and a start
# the join budget spreads (100 nodes x 600 of 6,000, 64 threads as above),
# and the same with the dead's fallback held 10 s (--hold-ms, as
# fallbackFor: the held death answered on the steady path, its Redis CPU).
SOAK_S    ?= 600

bench: deps all $(BUILD)/tests/bench/bench $(TOOLS_BINS) $(BUILD)/tests/e2e/test_faults \
	$(BUILD)/tests/e2e/test_podchurn $(BUILD)/tests/e2e/test_strict $(BUILD)/tests/e2e/test_inflight \
	$(BUILD)/tests/e2e/test_kubechurn $(BUILD)/tests/e2e/test_store_latency
	$(BUILD)/tests/bench/bench
	-$(BUILD)/tools/kt-storesim --nodes 1000 --members 10
	-$(BUILD)/tools/kt-storesim --nodes 1000 --members 10 --share demand
	-$(BUILD)/tools/kt-storesim --nodes 1000 --members 10 --share weighted
	-$(BUILD)/tools/kt-storesim --nodes 1000 --members 10 --share classes
	-$(BUILD)/tools/kt-storesim --nodes 1 --members 1 --groups 1000
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 100 --groups-total 10000
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 100 --groups-total 10000 --leases node
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 100 --groups-total 1000
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 100 --groups-total 1000 --leases node
	-$(BUILD)/tools/kt-storesim --nodes 1000 --members 1 --groups 10 --groups-total 1000 --leases node
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 600 --groups-total 6000 --leases node \
		--threads 64 --kill 10
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 600 --groups-total 6000 --leases node \
		--threads 64 --kill 10 --hold-ms 10000
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 1000 --groups-total 10000
	-$(BUILD)/tools/kt-storesim --nodes 100 --members 1 --groups 1000 --groups-total 10000 --leases node \
		--threads 64 --kill 10
	$(BUILD)/tools/kt-libbench
	-$(BUILD)/tools/kt-querybench
	KT_STRICT_BENCH=1 $(BUILD)/tests/e2e/test_strict
	KT_INFLIGHT_S=30 $(BUILD)/tests/e2e/test_inflight
	scripts/fault-table.sh $(BUILD)/tests/e2e/test_faults
	KT_LATENCY_STEPS=50,150,300,500,300,150,50 $(BUILD)/tests/e2e/test_store_latency
	KT_KUBECHURN_S=30 $(BUILD)/tests/e2e/test_kubechurn
	KT_PODCHURN_S=$(SOAK_S) $(BUILD)/tests/e2e/test_podchurn

# the benchmark is tests/bench/*.c, one file per section or pair of sections
# (bench.c: the table, the fixture and the driver), sharing bench.h
BENCH_SRCS := $(wildcard tests/bench/*.c)
$(BUILD)/tests/bench/bench: $(BENCH_SRCS) $(wildcard tests/bench/*.h) $(LIB_OBJS) $(TEST_HELPERS) $(HDRS)
	@mkdir -p $(@D)
	$(call msg,LD,$@)$(CC) $(CFLAGS) -Itests/lib $(LDFLAGS) $(BENCH_SRCS) $(LIB_OBJS) $(TEST_HELPERS) -o $@ $(LDLIBS) -lcmocka

# only kt-load: the other tools link tests/lib (cmocka), not in deps-demo
demo: deps-demo all $(BUILD)/tools/kt-load
	scripts/demo.sh

# Install for systemd hosts (docs/deploy.md, "Deploy with systemd"). PREFIX for the
# programs and the unit, DESTDIR for staging; the config lives in /etc
# whatever the PREFIX, and only its example is installed: an existing
# kthrottled.yaml is never touched. The unit is generated so that ExecStart
# names the installed daemon.
PREFIX    ?= /usr/local
DESTDIR   ?=
SBINDIR   ?= $(PREFIX)/sbin
BINDIR    ?= $(PREFIX)/bin
UNITDIR   ?= $(PREFIX)/lib/systemd/system
KT_ETCDIR ?= /etc/kthrottle
INSTALLED := $(DESTDIR)$(SBINDIR)/kthrottled $(DESTDIR)$(BINDIR)/kthrottlectl \
	     $(DESTDIR)$(UNITDIR)/kthrottled.service $(DESTDIR)$(KT_ETCDIR)/kthrottled.yaml.example

# (the unit goes through a pipe: install writes nothing outside DESTDIR)
install: $(BUILD)/kthrottled $(BUILD)/kthrottlectl deploy/systemd/kthrottled.service.in
	install -D -m 0755 $(BUILD)/kthrottled $(DESTDIR)$(SBINDIR)/kthrottled
	install -D -m 0755 $(BUILD)/kthrottlectl $(DESTDIR)$(BINDIR)/kthrottlectl
	sed 's|@SBINDIR@|$(SBINDIR)|g' deploy/systemd/kthrottled.service.in | \
		install -D -m 0644 /dev/stdin $(DESTDIR)$(UNITDIR)/kthrottled.service
	install -D -m 0644 deploy/systemd/kthrottled.yaml.example $(DESTDIR)$(KT_ETCDIR)/kthrottled.yaml.example

# removes the files install wrote, and the config dir only if nothing else
# (such as kthrottled.yaml) is left in it
uninstall:
	rm -f $(INSTALLED)
	[ ! -d $(DESTDIR)$(KT_ETCDIR) ] || rmdir --ignore-fail-on-non-empty $(DESTDIR)$(KT_ETCDIR)

# scripts/kernel-matrix.sh: each kernel boots with this tree's binaries (the
# host's root, read-only) and runs them; docs/development.md "Kernel matrix"
KERNEL_TESTS := $(filter $(BUILD)/tests/bpf/%,$(TEST_BINS)) \
	$(BUILD)/tests/e2e/test_daemon $(BUILD)/tests/e2e/test_escapes $(BUILD)/tests/e2e/test_tcp_bytes \
	$(BUILD)/tests/e2e/test_inflight $(BUILD)/tests/e2e/test_units $(BUILD)/tests/e2e/test_minimum \
	$(BUILD)/tests/e2e/test_calls_turns
.PHONY: kernels
kernels: all $(KERNEL_TESTS) $(TEST_TOOLS)
	scripts/kernel-matrix.sh $(BUILD)

clean:
	rm -rf $(BUILD)

.SECONDARY:

# the header dependencies the compiler wrote (none before the first build)
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
