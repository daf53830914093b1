# ngx_http_vlm_module: build, run and test.
#
#   make            the engine library, vlm-cli, the engine executable and
#                   the nginx dynamic module (build/)
#   make run        serve the default model on 127.0.0.1 (CPU backend)
#   make test       install what is missing, build, run every test
#   make fixtures   regenerate tests/fixtures with Hugging Face transformers
#   make default-model  retrain models/default (CPU, about 30 minutes)
#   make asan       unit tests under AddressSanitizer/LeakSanitizer
#   make bench      benchmarks under bench/
#   make fuzz       bounded libFuzzer runs (clang)

ROOT      := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
BUILD     ?= $(ROOT)/build
NGX_SRC   ?= /usr/share/nginx/src
NGINX     ?= /usr/sbin/nginx
PYTHON    ?= python3
VENV      ?= $(ROOT)/.venv
PORT      ?= 8080

CC        ?= cc
OPT       ?= -O2
SAN       ?=
CFLAGS_BASE := -std=c11 -g $(OPT) -fPIC -Wall -Wextra -Werror \
               -Wpointer-arith -Wno-unused-parameter -pthread $(SAN)
CPPFLAGS  += -I$(ROOT)/src
LDLIBS    := -lturbojpeg -lspng -lwebp -lgif -ljansson -lpcre2-8 -lutf8proc \
             -lopenblas -lm -lpthread -lrt

NVCC      ?= $(shell command -v nvcc 2>/dev/null || \
                     { test -x /usr/local/cuda/bin/nvcc && \
                       echo /usr/local/cuda/bin/nvcc; })
CUDA      ?= $(if $(NVCC),1,0)

# the engine library: every src/vlm_*.c (no nginx headers there)
LIB_SRCS  := $(sort $(wildcard src/vlm_*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIB       := $(BUILD)/libvlm.a

CUDA_SRCS := $(sort $(wildcard kernels/*.cu))
CUDA_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
ifeq ($(CUDA),1)
CUDA_HOME ?= $(abspath $(dir $(NVCC))/..)
CUDA_LIB  := $(BUILD)/libvlm_cuda.a
CUDA_LIBS := $(CUDA_LIB) -L$(CUDA_HOME)/lib64 -lcublas -lcudart -lnccl \
             -lstdc++
NVCCFLAGS ?= -O2 -std=c++17 -Xcompiler -fPIC,-Wall \
             -gencode arch=compute_90,code=sm_90 -I$(ROOT)/src
endif

CLI_SRCS  := $(sort $(wildcard src/cli/*.c))
CLI       := $(BUILD)/vlm-cli
ENGINE_SRCS := $(sort $(wildcard src/engine/*.c))
ENGINE    := $(BUILD)/vlm-engine

TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TESTS     := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
BENCH_SRCS := $(sort $(wildcard bench/bench_*.c))
BENCHES   := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

MODULE    := $(BUILD)/ngx_http_vlm_module.so
NGX_BUILD := $(BUILD)/nginx
MOD_SRCS  := config ngx_http_vlm_module.c $(wildcard src/ngx_http_vlm_*.[ch]) \
             $(wildcard src/vlm_*.[ch])

HDRS      := $(wildcard src/*.h)

.PHONY: all lib cli engine module deps unit prove test run fixtures asan \
        bench fuzz clean

all: lib cli $(if $(ENGINE_SRCS),engine) module

lib: $(LIB)
cli: $(CLI)
engine: $(ENGINE)
module: $(MODULE)

deps:
	@$(ROOT)/scripts/install-deps

$(BUILD)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(CPPFLAGS) -c $< -o $@

$(BUILD)/kernels/%.o: kernels/%.cu $(HDRS) $(wildcard kernels/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

ifeq ($(CUDA),1)
$(CUDA_LIB): $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
endif

$(CLI): $(CLI_SRCS:%.c=$(BUILD)/%.o) $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(ENGINE): $(ENGINE_SRCS:%.c=$(BUILD)/%.o) $(LIB) $(CUDA_LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $^ $(CUDA_LIBS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $^ -lcmocka $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The nginx module is built by nginx's own build system, against Debian's
# nginx-dev sources with the flags of Debian's nginx binary (--with-compat,
# -Werror), so the .so loads into the packaged nginx.  configure runs again
# only when the list of sources or the config file changes.
$(NGX_BUILD)/srcs.list: FORCE
	@mkdir -p $(dir $@)
	@ls config ngx_http_vlm_module.c src/*.c > $@.new; \
	 if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

$(NGX_BUILD)/objs/Makefile: $(NGX_BUILD)/srcs.list config
	@test -f $(NGX_SRC)/configure || { echo "nginx sources not found in \
	$(NGX_SRC): install the Debian package nginx-dev"; exit 1; }
	rm -rf $(NGX_BUILD)/src && mkdir -p $(NGX_BUILD) && \
	    cp -r $(NGX_SRC) $(NGX_BUILD)/src
	cd $(NGX_BUILD)/src && bash -c '. ./conf_flags && ./configure \
	    "$${NGX_CONF_FLAGS[@]}" \
	    --with-cc-opt="$$(dpkg-buildflags --get CFLAGS) -fPIC" \
	    --with-ld-opt="$$(dpkg-buildflags --get LDFLAGS) -fPIC" \
	    --builddir=$(NGX_BUILD)/objs \
	    --add-dynamic-module=$(ROOT)' > $(NGX_BUILD)/configure.log 2>&1 || \
	    { tail -20 $(NGX_BUILD)/configure.log; exit 1; }

$(MODULE): $(NGX_BUILD)/objs/Makefile $(MOD_SRCS)
	cd $(NGX_BUILD)/src && $(MAKE) -f $(NGX_BUILD)/objs/Makefile modules
	cp $(NGX_BUILD)/objs/ngx_http_vlm_module.so $@

FORCE:

# keep the objects of tests and benchmarks between runs
.SECONDARY:

unit: $(TESTS)
	@$(ROOT)/scripts/run-unit $(TESTS)

prove: module
	cd $(ROOT) && TEST_NGINX_BINARY=$(NGINX) \
	    TEST_NGINX_LOAD_MODULES=$(MODULE) \
	    VLM_BUILD=$(BUILD) prove -I$(ROOT)/t/lib -r t/

test: deps
	$(MAKE) all
	$(MAKE) unit
	$(MAKE) prove

run: deps
	$(MAKE) all
	@$(ROOT)/scripts/serve $(PORT)

fixtures:
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r tools/requirements.txt
	cd $(ROOT) && for s in tools/fixtures_*.py; do \
	    echo "== $$s"; $(VENV)/bin/python $$s || exit 1; done

# Train models/default (a tiny Qwen2-VL on synthetic shapes, CPU, about
# half an hour on 2 cores) and write its held-out set to
# tests/fixtures/default_model; not part of make test.
.PHONY: default-model
default-model:
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r tools/requirements.txt
	cd $(ROOT) && $(VENV)/bin/python tools/train_default_model.py

asan:
	$(MAKE) BUILD=$(ROOT)/build-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" unit

bench: $(BENCHES)
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf $(BUILD) $(ROOT)/build-asan $(ROOT)/build-fuzz t/servroot*
