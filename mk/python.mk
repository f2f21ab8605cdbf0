# mk/python.mk - included by the Makefile: `make python`.
#
# Python package (python/README.md): the C extension links the static
# library (its objects are -fPIC) so the module needs no libmooncake.so at
# run time; the pure-Python modules are copied next to it.
PYTHON ?= /usr/bin/python3
PY_INCLUDE := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PY_CSRCS := $(sort $(wildcard python/csrc/*.c))
PY_COBJS := $(PY_CSRCS:%.c=$(BUILD)/obj/%.o)
PY_MODS := $(sort $(wildcard python/mooncake/*.py))
PY_OUT := $(BUILD)/python/mooncake
PY_EXT := $(PY_OUT)/_mooncake$(PY_EXT_SUFFIX)

python: $(PY_EXT) $(PY_MODS:python/mooncake/%=$(PY_OUT)/%)

$(PY_COBJS): MC_CPPFLAGS += -isystem $(PY_INCLUDE) -fvisibility=hidden

$(PY_EXT): $(PY_COBJS) $(STATIC_LIB)
	@test -n "$(PY_EXT_SUFFIX)" || { echo "make python: $(PYTHON) not usable (install python3-dev)"; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(MC_CFLAGS) $(MC_LDFLAGS) -shared -Wl,--exclude-libs,ALL -o $@ $(PY_COBJS) \
	      $(STATIC_LIB) $(LDLIBS_LIB)

$(PY_OUT)/%.py: python/mooncake/%.py
	@mkdir -p $(dir $@)
	cp $< $@
