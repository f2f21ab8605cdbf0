# mooncake-c - build, test, run, install.
#
#   make              libmooncake.{a,so} and every program into $(BUILD)/
#   make check        format-check, check-layers, check-funcs, unit + integration + Python
#                     tests (test/run.sh)
#   make format-check every .c/.h as .clang-format writes it (make format rewrites them)
#   make check-layers who includes whom, against the layers block of each folder README
#   make check-funcs  no library function over 120 lines unless a "long:" comment says why
#   make asan|ubsan|tsan   the same tests under a sanitizer, in build/<san>/
#   make run          mooncake-master on conf/ defaults (see README.md)
#   make deps         install missing Debian packages (no-op when all present);
#                     make deps-build|deps-test|deps-bench: one part (mk/deps.sh)
#   make fuzz         libFuzzer targets (clang), each for FUZZ_TIME seconds
#   make chaos        the chaos driver (test/fault/README.md), CHAOS_ARGS="--duration 600"
#   make python       the Python package into $(BUILD)/python (PYTHONPATH=build/python)
#   make install PREFIX=/usr/local [DESTDIR=...]   (make uninstall: the same, removed)
#
# Sources are found by folder: every .c under the library folders goes into
# libmooncake; programs are listed below; every test/unit/**/*_test.c is a test.

VERSION_MAJOR := 0
VERSION := 0.1.0

BUILD ?= build
PREFIX ?= /usr/local
SAN ?=
FUZZ_TIME ?= 30

CC ?= cc
PKG_CONFIG ?= pkg-config
# libraries of the library proper; RDMA and CUDA come in at run time or via
# their own detection (transport/).
LIB_PKGS := libevent hiredis numa libpcre2-8 libsodium
# The real verbs provider (transport/rdma/verbs_real.c) is built against
# libibverbs when its headers exist; without them it reports no devices.
HAVE_IBVERBS := $(shell test -f /usr/include/infiniband/verbs.h && echo 1)
ifeq ($(HAVE_IBVERBS),1)
LIB_PKGS += libibverbs
RDMA_CPPFLAGS := -DMC_HAVE_IBVERBS
endif
# The node-local offload's batched reads (store/offload_io.c) use io_uring
# through liburing when it is installed; without it they are preads.
HAVE_URING := $(shell $(PKG_CONFIG) --exists liburing 2>/dev/null && echo 1)
ifeq ($(HAVE_URING),1)
LIB_PKGS += liburing
URING_CPPFLAGS := -DMC_HAVE_URING
endif
# Hashes of long inputs (checksums of objects and files, src/util/hash.c)
# go through libxxhash's dispatching entry points where it has them (x86:
# AVX2 or AVX-512 chosen at run time; the inlined header code is SSE2 only).
HAVE_XXH_DISPATCH := $(shell test -f /usr/include/xxh_x86dispatch.h && \
	$(PKG_CONFIG) --exists libxxhash 2>/dev/null && echo 1)
ifeq ($(HAVE_XXH_DISPATCH),1)
LIB_PKGS += libxxhash
XXH_CPPFLAGS := -DMC_HAVE_XXH_DISPATCH
endif
TEST_PKGS := cmocka msgpack
# The daemons (src/daemon.c, not the library) tell systemd when they are
# ready through libsystemd's sd_notify when its headers exist.
HAVE_SYSTEMD := $(shell $(PKG_CONFIG) --exists libsystemd 2>/dev/null && echo 1)
ifeq ($(HAVE_SYSTEMD),1)
DAEMON_CPPFLAGS := -DMC_HAVE_SYSTEMD
DAEMON_LIBS := $(shell $(PKG_CONFIG) --libs libsystemd)
endif

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wvla -Wno-missing-field-initializers
# OPT is the optimisation level; CFLAGS/LDFLAGS given by the user are added
# after the project's own flags (which a command-line CFLAGS cannot remove).
OPT ?= -O2 -g
MC_CPPFLAGS := -D_GNU_SOURCE -Iinclude -Isrc -I. $(RDMA_CPPFLAGS) $(URING_CPPFLAGS) \
	$(XXH_CPPFLAGS) $(CPPFLAGS)
MC_CFLAGS = $(OPT) -std=c11 -pthread -fPIC $(WARN) $(SAN_CFLAGS) $(CFLAGS)
MC_LDFLAGS = $(SAN_CFLAGS) $(LDFLAGS)
LIB_CFLAGS := -fvisibility=hidden
LDLIBS_LIB := $(shell $(PKG_CONFIG) --libs $(LIB_PKGS) 2>/dev/null) -lpthread -ldl -lm
LDLIBS_TEST := $(shell $(PKG_CONFIG) --libs $(TEST_PKGS) 2>/dev/null)

SAN_CFLAGS :=
ifeq ($(SAN),address)
SAN_CFLAGS := -fsanitize=address -fno-omit-frame-pointer
endif
ifeq ($(SAN),undefined)
SAN_CFLAGS := -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
endif
ifeq ($(SAN),thread)
SAN_CFLAGS := -fsanitize=thread
endif

# How much slower the tests run in this build: test/run.sh multiplies its
# time limits by TEST_SLOW, and the tests' own timeouts follow the same
# factor (compiled in as TC_SLOW, test/integration/cluster.h).
ifeq ($(SAN),thread)
TEST_SLOW ?= 5
else ifeq ($(SAN),address)
TEST_SLOW ?= 2
else
TEST_SLOW ?= 1
endif

LIB_DIRS := src/util reactor rpc transport store
LIB_SRCS := $(sort $(shell find $(LIB_DIRS) -name '*.c' 2>/dev/null))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)

# libmooncake.a (installed, and what the Python module links) exports only
# the public mc_* API: its objects are linked into one (ld -r) whose hidden
# symbols objcopy makes local, so a host program may define key_valid or
# store_remount itself. The programs and tests of this tree link
# libmooncake_int.a, the same objects with their internal symbols global.
STATIC_LIB := $(BUILD)/libmooncake.a
INT_LIB := $(BUILD)/libmooncake_int.a
SONAME := libmooncake.so.$(VERSION_MAJOR)
SHARED_LIB := $(BUILD)/libmooncake.so.$(VERSION)

# Programs: name := sources [, extra libraries]. Each links the static
# library; daemons add src/daemon.c and $(DAEMON_LIBS).
PROGRAMS :=
define program
PROGRAMS += $(BUILD)/$(1)
$(BUILD)/$(1): $(2:%.c=$(BUILD)/obj/%.o) $(INT_LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(MC_CFLAGS) $$(MC_LDFLAGS) -o $$@ $$(filter %.o,$$^) $(INT_LIB) $$(LDLIBS_LIB) $(3)
endef
DAEMON_SRCS := src/daemon.c
$(BUILD)/obj/src/daemon.o: MC_CPPFLAGS += $(DAEMON_CPPFLAGS)

-include mk/programs.mk

# Test helper programs (servers and drivers used by integration tests).
TEST_HELPER_SRCS := $(sort $(wildcard test/integration/helpers/*.c))
TEST_HELPERS := $(TEST_HELPER_SRCS:test/integration/helpers/%.c=$(BUILD)/test/bin/%)
UNIT_TEST_SRCS := $(sort $(shell find test/unit -name '*_test.c' 2>/dev/null))
UNIT_TESTS := $(UNIT_TEST_SRCS:%.c=$(BUILD)/%)
INTEG_TEST_SRCS := $(sort $(wildcard test/integration/*_test.c))
INTEG_TESTS := $(INTEG_TEST_SRCS:%.c=$(BUILD)/%)
# test/fault/: the fault proxy and the chaos driver (programs, into
# $(BUILD)/test/bin) and their tests (run with the integration tests).
FAULT_PROG_SRCS := $(filter-out %_test.c,$(sort $(wildcard test/fault/*.c)))
FAULT_PROGS := $(FAULT_PROG_SRCS:test/fault/%.c=$(BUILD)/test/bin/%)
FAULT_TEST_SRCS := $(sort $(wildcard test/fault/*_test.c))
FAULT_TESTS := $(FAULT_TEST_SRCS:%.c=$(BUILD)/%)
# A fake CUDA driver for the GPU paths' tests (test/fake/fake_libcuda.c;
# tests load it through MC_CUDA_LIBRARY).
FAKE_CUDA := $(BUILD)/test/lib/libfakecuda.so

.PHONY: all lib programs tests check unit integration asan ubsan tsan run deps deps-build deps-test deps-bench fuzz \
        install uninstall man clean format format-check check-layers check-funcs help chaos python
.DEFAULT_GOAL := all

all: lib programs
lib: $(STATIC_LIB) $(INT_LIB) $(SHARED_LIB)
programs: $(PROGRAMS)
# The Python package is part of the tests (test/python), except in sanitizer
# builds: an instrumented extension would need the runtime preloaded into
# the interpreter.
tests: all $(UNIT_TESTS) $(INTEG_TESTS) $(TEST_HELPERS) $(FAKE_CUDA) $(FAULT_PROGS) $(FAULT_TESTS) \
       $(if $(SAN),,python)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(MC_CPPFLAGS) $(MC_CFLAGS) $(if $(filter $(LIB_SRCS),$<),$(LIB_CFLAGS)) -MMD -MP -c -o $@ $<

# mc_version() (mooncake/version.h) is the Makefile's VERSION.
$(BUILD)/obj/src/util/version.o: MC_CPPFLAGS += -DMC_VERSION_STRING='"$(VERSION)"'
$(BUILD)/obj/src/util/version.o: Makefile

$(INT_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(STATIC_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ $(BUILD)/obj/libmooncake.o
	$(LD) -r -o $(BUILD)/obj/libmooncake.o $^
	objcopy --localize-hidden $(BUILD)/obj/libmooncake.o
	ar rcs $@ $(BUILD)/obj/libmooncake.o

$(SHARED_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(MC_CFLAGS) $(MC_LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $@ $^ $(LDLIBS_LIB)
	ln -sf $(notdir $@) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libmooncake.so

$(BUILD)/obj/test/%.o: MC_CPPFLAGS += -DTC_SLOW=$(TEST_SLOW)

$(BUILD)/test/%: $(BUILD)/obj/test/%.o $(INT_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(MC_CFLAGS) $(MC_LDFLAGS) -o $@ $< $(INT_LIB) $(LDLIBS_TEST) $(LDLIBS_LIB)

$(BUILD)/test/bin/%: $(BUILD)/obj/test/integration/helpers/%.o $(INT_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(MC_CFLAGS) $(MC_LDFLAGS) -o $@ $< $(INT_LIB) $(LDLIBS_TEST) $(LDLIBS_LIB)

# make python: the Python package (mk/python.mk)
include mk/python.mk

$(BUILD)/test/bin/%: $(BUILD)/obj/test/fault/%.o $(INT_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(MC_CFLAGS) $(MC_LDFLAGS) -o $@ $< $(INT_LIB) $(LDLIBS_LIB)

$(FAKE_CUDA): test/fake/fake_libcuda.c
	@mkdir -p $(dir $@)
	$(CC) $(MC_CFLAGS) -Wno-missing-prototypes $(MC_LDFLAGS) -shared -o $@ $<

# The chaos driver for as long as CHAOS_ARGS say (test/fault/README.md).
CHAOS_ARGS ?= --duration 600
chaos: tests
	TEST_BUILD_DIR=$(BUILD) TEST_BIN_DIR=$(BUILD)/test/bin $(BUILD)/test/bin/chaos $(CHAOS_ARGS)

check: tests format-check check-layers check-funcs
	BUILD=$(BUILD) TEST_SLOW=$(TEST_SLOW) test/run.sh

format-check:
	mk/check-format.sh

check-layers:
	mk/check-layers.sh

check-funcs:
	mk/check-funcs.sh

unit: tests
	BUILD=$(BUILD) TEST_SLOW=$(TEST_SLOW) test/run.sh unit

integration: tests
	BUILD=$(BUILD) TEST_SLOW=$(TEST_SLOW) test/run.sh integration

asan:
	$(MAKE) BUILD=build/asan SAN=address OPT="-O1 -g" check
ubsan:
	$(MAKE) BUILD=build/ubsan SAN=undefined OPT="-O1 -g" check
tsan:
	$(MAKE) BUILD=build/tsan SAN=thread OPT="-O1 -g" check

run: all
	./mk/run.sh $(BUILD)

deps:
	./mk/deps.sh all
deps-build deps-test deps-bench:
	./mk/deps.sh $(@:deps-%=%)

FUZZ_SRCS := $(sort $(wildcard test/fuzz/*_fuzz.c))
FUZZ_BINS := $(FUZZ_SRCS:test/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_LIB_SRCS := src/util/mem.c src/util/status.c src/util/log.c src/util/buf.c \
                 rpc/frame.c rpc/msgpack.c

$(BUILD)/fuzz/%: test/fuzz/%.c $(FUZZ_LIB_SRCS)
	@mkdir -p $(dir $@)
	clang $(MC_CPPFLAGS) -std=c11 -g -O1 $(WARN) -fsanitize=fuzzer,address,undefined \
	      -fno-sanitize-recover=all -o $@ $^ -lpthread

fuzz: $(FUZZ_BINS)
	@for f in $(FUZZ_BINS); do \
	  name=$$(basename $$f); corpus=test/fuzz/corpus/$$name; \
	  mkdir -p $(BUILD)/fuzz/work-$$name; \
	  echo "== $$name for $(FUZZ_TIME)s"; \
	  $$f -max_total_time=$(FUZZ_TIME) -max_len=65536 -print_final_stats=1 \
	      $(BUILD)/fuzz/work-$$name $$( [ -d $$corpus ] && echo $$corpus ) || exit 1; \
	done

# make install: daemons and tools to $(BINDIR) (benchmarks stay in the build
# tree), the library to $(LIBDIR) (Debian multiarch), headers, pkg-config,
# man pages, conf files to $(SYSCONFDIR)/mooncake (an existing one is kept:
# edits survive a reinstall), systemd units and the sysusers entry with the
# paths of this PREFIX. make uninstall removes all of it, except conf files
# that were edited after the install (it says which).
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib$(if $(MULTIARCH),/$(MULTIARCH))
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
INSTALL_PROGRAMS = $(filter $(BUILD)/mooncake-%,$(PROGRAMS))
INSTALL_SCRIPTS := tools/mooncake_client
CONF_FILES := $(sort $(wildcard conf/*.conf))
UNIT_FILES := $(sort $(wildcard conf/systemd/*.service))
MAN_PAGES = $(INSTALL_PROGRAMS:$(BUILD)/%=$(BUILD)/man/%.1)

# Man pages from each program's --help and --version (help2man).
man: $(MAN_PAGES)
$(BUILD)/man/%.1: $(BUILD)/%
	@mkdir -p $(dir $@)
	help2man --no-info --version-string=$(VERSION) \
	    --name="$$(sed -n 's/^$*: //p' mk/man-names)" -o $@ ./$<

install: all man
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)/mooncake $(DESTDIR)$(BINDIR) \
	           $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(SYSCONFDIR)/mooncake $(DESTDIR)$(UNITDIR) \
	           $(DESTDIR)$(SYSUSERSDIR)
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libmooncake.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libmooncake.so
	install -m 644 include/mooncake/*.h $(DESTDIR)$(INCLUDEDIR)/mooncake/
	install -m 755 $(INSTALL_PROGRAMS) $(INSTALL_SCRIPTS) $(DESTDIR)$(BINDIR)/
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LDLIBS_LIB)|' mk/mooncake.pc.in \
	    > $(DESTDIR)$(LIBDIR)/pkgconfig/mooncake.pc
	@for f in $(CONF_FILES); do \
	  d=$(DESTDIR)$(SYSCONFDIR)/mooncake/$$(basename $$f); \
	  if [ -e $$d ]; then echo "install: keeping $$d (exists)"; \
	  else install -m 644 $$f $$d; fi; \
	done
	@for f in $(UNIT_FILES); do \
	  sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/usr/local/etc/|$(SYSCONFDIR)/|g' $$f \
	    > $(DESTDIR)$(UNITDIR)/$$(basename $$f) || exit 1; \
	done
	install -m 644 conf/systemd/mooncake.sysusers $(DESTDIR)$(SYSUSERSDIR)/mooncake.conf

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libmooncake.a $(DESTDIR)$(LIBDIR)/libmooncake.so \
	      $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libmooncake.so.$(VERSION) \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/mooncake.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/mooncake
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(INSTALL_PROGRAMS) $(INSTALL_SCRIPTS)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN_PAGES)))
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(notdir $(UNIT_FILES)))
	rm -f $(DESTDIR)$(SYSUSERSDIR)/mooncake.conf
	@for f in $(CONF_FILES); do \
	  d=$(DESTDIR)$(SYSCONFDIR)/mooncake/$$(basename $$f); \
	  if cmp -s $$f $$d; then rm -f $$d; \
	  elif [ -e $$d ]; then echo "uninstall: keeping $$d (edited)"; fi; \
	done
	-rmdir $(DESTDIR)$(SYSCONFDIR)/mooncake 2>/dev/null

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build

help:
	@sed -n '2,18p' Makefile

# make -s print-VAR: a variable's value (python/setup.py reads LDLIBS_LIB).
print-%:
	@echo $($*)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
