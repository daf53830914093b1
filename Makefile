# ngx_http_vlm_module: build, run and test.
#
#   make            the engine library, vlm-cli, the engine executable and
#                   the nginx dynamic module (build/), for the CPU backend
#   make CUDA=1     the same with the CUDA backend (nvcc, cuBLAS, NCCL)
#   make install    the module and vlm-engine where nginx loads modules,
#                   vlm-cli and a sample configuration under PREFIX
#                   (DESTDIR for staging, see docs/building.md)
#   make run        serve the default model on 127.0.0.1 (CPU backend)
#   make test       install what is missing, build, run every test (the
#                   nginx suites three at a time, the builds for what
#                   follows them beside them at nice 19)
#   make prove      the nginx suites (t/), one after the other
#   make prove-parallel  the same, three at a time (PROVE_JOBS)
#   make fixtures   regenerate tests/fixtures with Hugging Face transformers
#   make default-model  retrain models/default (CPU, one core, about 26 minutes)
#   make asan       unit tests under ASan (and LeakSanitizer) + UBSan;
#                   make test runs them last
#   make test-cuda-emu  the CUDA backend on the emulated device of
#                   tests/cudaemu, from its ops to t/021 through nginx
#   make asan-cuda-emu  its emulator and op tests under ASan + UBSan
#   make racecheck-cuda-emu  its op tests under ThreadSanitizer: the
#                   kernels' data races, as CUDA's racecheck finds them
#   make bench-cuda-emu  bench_tower, bench_engine and the sampling bench on the
#                   emulated device, read back by gpu-check --bench-rows
#   make asan-nginx the module and the engine under ASan + UBSan: every
#                   t/ suite and the HTTP fuzzer (fuzz/http_fuzz.pl)
#   make bench      benchmarks under bench/
#   make bench-build  build them only (make test does, so they keep
#                   compiling)
#   make fuzz       bounded libFuzzer runs (clang)
#   make fuzz-seeds the fuzz targets over their seeds, without libFuzzer
#   make venv-test  the OpenAI Python SDK for t/009 in build/venv-test
#   make load       1,000 requests at concurrency 16 against a real nginx:
#                   engine and worker RSS and pools must stay flat
#                   (bench/load.pl)
#   make load-images  the same with 7 pictures of 1120x700 a request,
#                   2,000 requests, served by models/default (TP=N: by an
#                   engine group of N ranks)

.DEFAULT_GOAL := all

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
# the parts of src/, lowest first; every folder but http/ and cli/ is
# the engine library.  A file includes another folder's header by its
# path from src/ ("queue/vlm_queue.h"), its own folder's by name.
LIB_DIRS  := core queue grammar api text image backend model model/qwen2vl \
             model/qwen3vl model/idefics3 model/internvl model/siglip \
             model/gemma3 engine
SRC_DIRS  := $(LIB_DIRS) http cli
CPPFLAGS  += -I$(ROOT)/src
LDLIBS    := -lturbojpeg -lspng -lwebp -lgif -ljansson -lpcre2-8 -lutf8proc \
             -lopenblas -lxxhash -lavformat -lavcodec -lswscale -lavutil \
             -lm -lpthread -lrt

# CUDA=1 builds the CUDA backend too (the kernels for CUDA_ARCHS, which
# takes minutes): only when asked, so that a CPU build never waits for it
CUDA      ?= 0
NVCC      ?= $(shell command -v nvcc 2>/dev/null || \
                     { test -x /usr/local/cuda/bin/nvcc && \
                       echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CUDA),1)
ifeq ($(NVCC),)
$(error CUDA=1: nvcc not found: install the CUDA Toolkit or set NVCC)
endif
endif
# the GPUs of the fat binary: machine code for each, PTX for the last
# (make CUDA_ARCHS=90 builds Hopper only, much faster)
CUDA_ARCHS ?= 80 89 90

# the engine library: every vlm_*.c of those folders (no nginx headers
# there) but the engine executable's main and the CUDA backend's host
# code, which goes with the kernels into libvlm_cuda.a
ENGINE_SRCS := src/engine/vlm_engine_main.c
CUDA_HOST_SRCS := src/backend/vlm_backend_cuda.c src/backend/vlm_cuda_fpool.c \
                  src/backend/vlm_cuda_sample.c src/backend/vlm_comm_nccl.c \
                  src/backend/vlm_comm_staged.c
LIB_SRCS  := $(sort $(filter-out $(ENGINE_SRCS) $(CUDA_HOST_SRCS), \
                 $(wildcard $(LIB_DIRS:%=src/%/vlm_*.c))))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIB       := $(BUILD)/libvlm.a

CUDA_SRCS := $(sort $(wildcard kernels/*.cu))
CUDA_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/%.o) \
             $(CUDA_HOST_SRCS:%.c=$(BUILD)/%.o)
ifeq ($(CUDA),1)
CUDA_HOME ?= $(abspath $(dir $(NVCC))/..)
comma     := ,
CUDA_LIB  := $(BUILD)/libvlm_cuda.a
# NCCL: the toolkit's, or NCCL_HOME with include/ and lib/ (the
# nvidia-nccl wheel's folder, whose lib/ has libnccl.so.2 only)
NCCL_HOME ?=
NCCL_LIBS := $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib \
                 -Wl$(comma)-rpath$(comma)$(NCCL_HOME)/lib) -l:libnccl.so.2
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
             $(NCCL_LIBS) -lcublasLt -lcublas -lcudart -lstdc++
CUDA_PTX  := $(lastword $(CUDA_ARCHS))
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS), \
                    -gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
NVCCFLAGS ?= -O3 -std=c++17 -Werror all-warnings \
             -Xcompiler -fPIC,-Wall,-Wextra,-Werror,-Wno-unused-parameter \
             $(CUDA_GENCODE) $(CPPFLAGS) -I$(ROOT)/kernels
# the CUDA backend's host code: plain C with the project's warnings
$(CUDA_HOST_SRCS:%.c=$(BUILD)/%.o): CPPFLAGS += \
    $(if $(NCCL_HOME),-I$(NCCL_HOME)/include) -I$(CUDA_HOME)/include \
                                                -I$(ROOT)/kernels
$(CUDA_HOST_SRCS:%.c=$(BUILD)/%.o): $(wildcard kernels/*.h)
$(ENGINE_SRCS:%.c=$(BUILD)/%.o): CPPFLAGS += -DVLM_HAVE_CUDA=1
endif
$(ENGINE_SRCS:%.c=$(BUILD)/%.o): $(BUILD)/cuda.flag

# the engine's main is rebuilt when CUDA comes or goes
$(BUILD)/cuda.flag: FORCE
	@mkdir -p $(dir $@)
	@echo "$(CUDA) $(CUDA_ARCHS)" > $@.new; \
	 if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

CLI_SRCS  := $(sort $(wildcard src/cli/*.c))
CLI       := $(BUILD)/vlm-cli
ENGINE    := $(BUILD)/vlm-engine

# the CUDA backend against the CPU backend, tests/cuda_test.c linked into
# each: test_backend_ops its ops, test_cuda_attn the attention,
# test_cuda_sample the sampling, test_cuda_models the model's caches,
# fusions and graphs, test_cuda_qwen the Qwen families' parity,
# test_cuda_parity the other families' (the heaviest, test_cuda_models
# and test_cuda_qwen, of about equal run time, for runs side by side);
# test_comm_nccl runs NCCL on the GPUs, test_tp_cuda a tensor-parallel
# group with images on two: CUDA builds only
CUDA_OPS_TESTS := tests/test_backend_ops.c tests/test_cuda_attn.c \
                  tests/test_cuda_sample.c tests/test_cuda_models.c \
                  tests/test_cuda_qwen.c tests/test_cuda_parity.c
CUDA_TESTS := $(CUDA_OPS_TESTS) tests/test_comm_nccl.c tests/test_tp_cuda.c
TEST_SRCS := $(sort $(filter-out $(if $(filter 1,$(CUDA)),,$(CUDA_TESTS)), \
                 $(wildcard tests/test_*.c)))
TESTS     := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
BENCH_SRCS := $(sort $(wildcard bench/bench_*.c))
BENCHES   := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
# the benchmarks that run on the CUDA backend too (--backend cuda) in a
# CUDA build, and on the emulated device in build-cudaemu/bench/
CUDA_BENCHES := bench/bench_tower.c bench/bench_engine.c
ifeq ($(CUDA),1)
$(CUDA_BENCHES:bench/%.c=$(BUILD)/bench/%.o): CPPFLAGS += -DVLM_HAVE_CUDA=1
endif
$(CUDA_BENCHES:bench/%.c=$(BUILD)/bench/%.o): $(BUILD)/cuda.flag

MODULE    := $(BUILD)/ngx_http_vlm_module.so
NGX_BUILD := $(BUILD)/nginx
HDRS      := $(wildcard $(SRC_DIRS:%=src/%/*.h)) $(wildcard tests/*.h)
MOD_SRCS  := config ngx_http_vlm_module.c $(wildcard src/http/*.c) $(HDRS)

.PHONY: all lib cli engine module deps unit prove test run fixtures asan asan-cuda-emu \
        bench bench-build fuzz fuzz-openai clean FORCE venv-test load \
        load-images

all: lib cli $(if $(ENGINE_SRCS),engine) module

lib: $(LIB)
cli: $(CLI)
engine: $(ENGINE)
module: $(MODULE)

deps:
	@$(ROOT)/scripts/install-deps

# Each object depends on the headers it includes, as the compiler lists
# them (-MMD) in a .d file next to it; an object without its .d file is
# rebuilt, so the first build after this rule writes them all.
$(BUILD)/%.o: %.c $(BUILD)/%.d
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(CPPFLAGS) -MMD -MP -MT $@ \
	    -MF $(BUILD)/$*.Td -c $< -o $@
	@mv -f $(BUILD)/$*.Td $(BUILD)/$*.d && touch $@

DEPS := $(patsubst %.c,$(BUILD)/%.d,$(wildcard src/*/*.c src/*/*/*.c \
                                               tests/*.c bench/*.c))
$(DEPS):
-include $(wildcard $(DEPS))

# the kernels include kernels/ headers and src/core/vlm_dtype.h
$(BUILD)/kernels/%.o: kernels/%.cu $(wildcard kernels/*.h kernels/*.cuh) \
                      src/core/vlm_dtype.h $(BUILD)/cuda.flag
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

# a sanitizer build: the engine's reports go to $(BUILD)/sanitizer
$(ENGINE_SRCS:%.c=$(BUILD)/%.o): CPPFLAGS += \
    $(if $(SAN),-DVLM_SANITIZER_LOG_DIR='"$(BUILD)/sanitizer"')

$(ENGINE): $(ENGINE_SRCS:%.c=$(BUILD)/%.o) $(LIB) $(CUDA_LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $(filter %.o,$^) $(CUDA_LIB) \
	    $(LIB) $(CUDA_LIBS) $(LDLIBS)

$(CUDA_TESTS:tests/%.c=$(BUILD)/tests/%): $(BUILD)/tests/%: \
                                 $(BUILD)/tests/%.o $(LIB) $(CUDA_LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $< $(CUDA_TEST_OBJ) $(CUDA_LIB) \
	    $(LIB) -lcmocka $(CUDA_LIBS) $(LDLIBS)
$(CUDA_OPS_TESTS:tests/%.c=$(BUILD)/tests/%): $(BUILD)/tests/cuda_test.o
$(CUDA_OPS_TESTS:tests/%.c=$(BUILD)/tests/%): \
    CUDA_TEST_OBJ = $(BUILD)/tests/cuda_test.o
$(BUILD)/tests/test_comm_nccl.o $(BUILD)/tests/test_tp_cuda.o: \
    CPPFLAGS += -I$(CUDA_HOME)/include

# runs the tool it tests
$(BUILD)/tests/test_quantize: | $(CLI)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $^ -lcmocka $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(CUDA_BENCHES:bench/%.c=$(BUILD)/bench/%): $(BUILD)/bench/%: \
                                 $(BUILD)/bench/%.o $(LIB) $(CUDA_LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $< $(CUDA_LIB) $(LIB) \
	    $(CUDA_LIBS) $(LDLIBS)

# The nginx module is built by nginx's own build system, against Debian's
# nginx-dev sources with the flags of Debian's nginx binary (--with-compat,
# -Werror), so the .so loads into the packaged nginx.  It compiles the glue
# of src/http only and links the engine library built above (VLM_LIB: the
# config file then leaves building it to this Makefile).  configure runs
# again only when the list of sources or the config file changes.
$(NGX_BUILD)/srcs.list: FORCE
	@mkdir -p $(dir $@)
	@ls config ngx_http_vlm_module.c $(sort $(wildcard src/http/*.c)) \
	    > $@.new; echo "$(LIB)" >> $@.new; \
	 if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

$(NGX_BUILD)/objs/Makefile: $(NGX_BUILD)/srcs.list config
	@test -f $(NGX_SRC)/configure || { echo "nginx sources not found in \
	$(NGX_SRC): install the Debian package nginx-dev"; exit 1; }
	rm -rf $(NGX_BUILD)/src && mkdir -p $(NGX_BUILD) && \
	    cp -r $(NGX_SRC) $(NGX_BUILD)/src
	cd $(NGX_BUILD)/src && VLM_LIB=$(LIB) bash -c '. ./conf_flags && \
	    ./configure \
	    "$${NGX_CONF_FLAGS[@]}" \
	    --with-cc-opt="$$(dpkg-buildflags --get CFLAGS) -fPIC $(SAN)" \
	    --with-ld-opt="$$(dpkg-buildflags --get LDFLAGS) -fPIC $(SAN)" \
	    --builddir=$(NGX_BUILD)/objs \
	    --add-dynamic-module=$(ROOT)' > $(NGX_BUILD)/configure.log 2>&1 || \
	    { tail -20 $(NGX_BUILD)/configure.log; exit 1; }

# the new module replaces the old one by a rename, never in place: an
# nginx running from build/ keeps the file it mapped
$(MODULE): $(NGX_BUILD)/objs/Makefile $(MOD_SRCS) $(LIB)
	cd $(NGX_BUILD)/src && $(MAKE) -f $(NGX_BUILD)/objs/Makefile modules
	cp $(NGX_BUILD)/objs/ngx_http_vlm_module.so $@.new && mv -f $@.new $@

FORCE:

$(BENCHES:%=%.o): $(wildcard bench/*.h)

# keep the objects of tests and benchmarks between runs
.SECONDARY: $(TESTS:%=%.o) $(BENCHES:%=%.o)

# Qwen2's own tokenizer (151,669 tokens, 11 MB of JSON) is kept
# compressed, so that the tree a GPU run carries stays small; the unit
# tests, the benchmarks and the fixture scripts read it unpacked beside
# the archive (git ignores it); defined before the rules that name it,
# whose prerequisites make reads as it meets them
QWEN_TOKENIZER := $(ROOT)/tests/fixtures/tokenizer/qwen/tokenizer.json

$(QWEN_TOKENIZER): $(QWEN_TOKENIZER).xz
	@xz -dc $< > $@.tmp 2>/dev/null \
	    || $(PYTHON) -c 'import lzma, sys; \
	           sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' \
	           $< > $@.tmp
	@mv $@.tmp $@

unit: $(TESTS) $(QWEN_TOKENIZER)
	@UNIT_JOBS=$${UNIT_JOBS:-$(NPROC)} $(ROOT)/scripts/run-unit $(TESTS)


PROVE_ENV := TEST_NGINX_BINARY=$(NGINX) TEST_NGINX_LOAD_MODULES=$(MODULE) \
             VLM_BUILD=$(BUILD)

# make prove: the nginx suites one after the other
prove: module
	cd $(ROOT) && $(PROVE_ENV) prove -I$(ROOT)/t/lib -r t/

# make prove-parallel: the same suites PROVE_JOBS at a time, each in a
# slot of ports and a server root of its own (scripts/prove-slot): they
# mostly wait (reloads a second apart, slow readers, timeouts).  The
# suites that time the server under load run one at a time beside the
# others (t/testrules.yml, which prove reads); the longest start first.
# PROVE_SUITES: the suites to run (all of t/)
PROVE_JOBS   ?= 3
PROVE_SUITES ?= $(sort $(wildcard t/*.t))
PROVE_FIRST  := $(wildcard t/098-*.t t/096-*.t t/085-*.t t/008-*.t \
                           t/081-*.t t/044-*.t t/060-s*.t t/002-*.t)

.PHONY: prove-parallel
prove-parallel: module
	cd $(ROOT) && $(PROVE_ENV) PROVE_SLOTS=$(PROVE_JOBS) \
	    prove -j$(PROVE_JOBS) --timer \
	    --exec '$(ROOT)/scripts/prove-slot -I$(ROOT)/t/lib' \
	    $(filter $(PROVE_SUITES),$(PROVE_FIRST)) \
	    $(filter-out $(PROVE_FIRST),$(PROVE_SUITES))

NPROC     := $(shell nproc 2>/dev/null || echo 2)

# make test: the builds that the nginx suites need first, then the
# suites (make prove-parallel) while the other builds (make test-builds,
# a process group of its own) run beside them at nice 19, on the cores
# the suites leave idle, and at nice 0 once the suites are done (where
# renice may); then every test that keeps the cores busy, one after the
# other.  t/022 serves with make cuda's engine, which make test-builds
# builds: it runs once that is done.  The SDK's venv (mostly downloads)
# is made beside the build; its failure only skips t/009 and t/069
TEST_BUILDS_LOG := $(BUILD)/test-builds.log
PROVE_CUDA      := t/022-cuda-no-gpu.t

test: deps
	@$(MAKE) venv-test & v=$$!; \
	 $(MAKE) -j$(NPROC) all; s=$$?; \
	 wait $$v || echo "make venv-test failed: t/009 and t/069 skip"; \
	 exit $$s
	@echo "make test-builds: at nice 19 beside the suites" \
	    "(its output in $(TEST_BUILDS_LOG))"
	@setsid nice -n 19 $(MAKE) test-builds > $(TEST_BUILDS_LOG) 2>&1 & \
	 b=$$!; trap 'kill -TERM -- -'$$b' 2>/dev/null; exit 1' INT TERM; \
	 $(MAKE) prove-parallel PROVE_SUITES="$(filter-out $(PROVE_CUDA), \
	                                      $(sort $(wildcard t/*.t)))"; \
	 p=$$?; \
	 renice 0 -g $$b > /dev/null 2>&1; \
	 wait $$b || { tail -n 40 $(TEST_BUILDS_LOG); \
	               echo "make test-builds failed: $(TEST_BUILDS_LOG)"; \
	               exit 1; }; \
	 exit $$p
	$(MAKE) prove-parallel PROVE_SUITES=$(PROVE_CUDA)
	$(MAKE) unit
	$(MAKE) test-cuda-emu
	$(MAKE) bench-cuda-emu
	$(MAKE) soak-cuda-emu REQUESTS=200
	$(MAKE) asan-fuzz HTTP_FUZZ_REQUESTS=3000 HTTP_FUZZ_SECONDS=120
	$(MAKE) -j$(NPROC) asan
	$(MAKE) -j$(NPROC) asan-cuda-emu
	$(MAKE) -j$(NPROC) racecheck-cuda-emu

# what make test runs after the suites, built: the unit tests and the
# benchmarks, the CUDA backend on the emulated device, make cuda, the
# ASan builds (the module and the engine, the unit tests, the emulated
# op tests; they share build-asan/'s engine library) and the race
# check's (the emulated op tests under ThreadSanitizer)
.PHONY: test-builds
test-builds:
	$(MAKE) -j$(NPROC) $(TESTS) $(QWEN_TOKENIZER) bench-build \
	    $(EMU_TESTS) $(EMU_ENGINE) $(EMU_BENCHES)
	$(MAKE) cuda
	$(MAKE) asan-nginx-build
	$(ASAN_MAKE) -j$(NPROC) $(TESTS:$(BUILD)/%=$(ASAN_BUILD)/%)
	$(ASAN_MAKE) -j$(NPROC) EMU_BUILD=$(ASAN_EMU_BUILD) $(ASAN_EMU_TESTS)
	$(TSAN_MAKE) -j$(NPROC) $(TSAN_EMU_TESTS)

# make cuda: the CUDA backend (the engine with it, the CUDA tests) built
# in build-cuda/, apart from the CPU build that make run serves; make test
# runs it so that the CUDA code keeps compiling wherever nvcc is installed
CUDA_BUILD := $(ROOT)/build-cuda

.PHONY: cuda
cuda:
	@if [ -z "$(NVCC)" ]; then \
	    echo "make cuda: nvcc not found, the CUDA backend is not built"; \
	 else \
	    $(MAKE) -j$(NPROC) BUILD=$(CUDA_BUILD) CUDA=1 engine \
	        $(CUDA_TESTS:tests/%.c=$(CUDA_BUILD)/tests/%); \
	 fi

# make test-cuda-emu: the CUDA backend on the emulated device of
# tests/cudaemu (the kernels built by the host C++ compiler, the runtime,
# cuBLAS and NCCL run on the CPU), in build-cudaemu/, and on it the CUDA
# tests; no GPU and no CUDA toolkit needed
EMU_BUILD := $(ROOT)/build-cudaemu
EMU_DIR   := tests/cudaemu
EMU_SRCS  := $(sort $(wildcard $(EMU_DIR)/*.cc))
EMU_HDRS  := $(wildcard $(EMU_DIR)/*.h $(EMU_DIR)/include/*.h \
                        kernels/*.h kernels/*.cuh) src/core/vlm_dtype.h
EMU_OBJS  := $(EMU_SRCS:%.cc=$(EMU_BUILD)/%.o) \
             $(CUDA_SRCS:%.cu=$(EMU_BUILD)/%.o) \
             $(CUDA_HOST_SRCS:%.c=$(EMU_BUILD)/%.o)
EMU_SELF  := $(EMU_BUILD)/$(EMU_DIR)/test_cudaemu \
             $(EMU_BUILD)/$(EMU_DIR)/test_cudaemu_nccl \
             $(EMU_BUILD)/$(EMU_DIR)/test_racecheck
EMU_TESTS := $(EMU_SELF) $(CUDA_TESTS:tests/%.c=$(EMU_BUILD)/tests/%)
CXX       ?= c++
# EMU_DEFS: -DCUDAEMU_RACECHECK=1 for make racecheck-cuda-emu, whose
# emulated runtime (EMU_RT_SAN) is built without ThreadSanitizer
EMU_DEFS   ?=
EMU_RT_SAN ?= $(SAN)
# the engine library the emulated tests link (racecheck: build/'s)
EMU_LIB    ?= $(LIB)
EMU_CXXFLAGS_BASE := -std=c++17 -g $(OPT) -fPIC -Wall -Wextra -Werror \
                -Wno-unused-parameter -Wno-unknown-pragmas -pthread \
                $(EMU_DEFS) -I$(ROOT)/$(EMU_DIR)/include -I$(ROOT)/kernels \
                -I$(ROOT)/src
EMU_CXXFLAGS := $(EMU_CXXFLAGS_BASE) $(SAN)
EMU_CPPFLAGS := $(CPPFLAGS) -DVLM_CUDAEMU=1 $(EMU_DEFS) \
                -I$(ROOT)/$(EMU_DIR)/include -I$(ROOT)/kernels \
                -I$(ROOT)/$(EMU_DIR)

$(EMU_BUILD)/$(EMU_DIR)/%.o: $(EMU_DIR)/%.cc $(EMU_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS_BASE) $(EMU_RT_SAN) -I$(ROOT)/$(EMU_DIR) \
	    -c $< -o $@

$(EMU_BUILD)/%.o: %.cu $(EMU_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -x c++ -c $< -o $@

$(EMU_BUILD)/%.o: %.c $(EMU_HDRS) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(EMU_CPPFLAGS) -c $< -o $@

$(EMU_TESTS): %: %.o $(EMU_OBJS) $(EMU_LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $< $(CUDA_TEST_OBJ) $(EMU_OBJS) \
	    $(EMU_LIB) -lcmocka -lstdc++ $(LDLIBS)
$(CUDA_OPS_TESTS:tests/%.c=$(EMU_BUILD)/tests/%): \
    $(EMU_BUILD)/tests/cuda_test.o
$(CUDA_OPS_TESTS:tests/%.c=$(EMU_BUILD)/tests/%): \
    CUDA_TEST_OBJ = $(EMU_BUILD)/tests/cuda_test.o

# the engine with the CUDA backend on the emulated device; its
# --features says "cudaemu", that nobody takes it for a GPU's.  t/021
# serves through nginx with it (the module and the CPU engine of BUILD
# beside it), counted in the closing line with the tests above
EMU_ENGINE := $(EMU_BUILD)/vlm-engine
EMU_SUITES := t/021-cuda.t t/094-cuda-pool-faults.t

$(ENGINE_SRCS:%.c=$(EMU_BUILD)/%.o): EMU_CPPFLAGS += -DVLM_HAVE_CUDA=1 \
                                                    -DVLM_CUDAEMU=1

$(EMU_ENGINE): $(ENGINE_SRCS:%.c=$(EMU_BUILD)/%.o) $(EMU_OBJS) $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $(filter %.o,$^) $(LIB) \
	    -lstdc++ $(LDLIBS)

# bench_tower and bench_engine on the emulated device (--backend cuda):
# make bench-cuda-emu runs them on a tiny checkpoint
EMU_BENCHES := $(CUDA_BENCHES:bench/%.c=$(EMU_BUILD)/bench/%)

$(EMU_BENCHES:%=%.o): EMU_CPPFLAGS += -DVLM_HAVE_CUDA=1
$(EMU_BENCHES:%=%.o): $(wildcard bench/*.h)

$(EMU_BENCHES): %: %.o $(EMU_OBJS) $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $< $(EMU_OBJS) $(LIB) \
	    -lstdc++ $(LDLIBS)

# make bench-cuda-emu: bench_tower and bench_engine --backend cuda on the
# emulated device, on the tiny Qwen2.5-VL fixture at small sizes (the
# GPU path and the BENCH_ lines, not a GPU's figures), the prompt with
# VLM_CUDA_FUSE=off and with VLM_CUDA_ACT=f32 too, decode at 1 and 16
# streams without and with CUDA graphs too, and test_cuda_sample
# --bench-sample once, their lines read back by scripts/gpu-check
# --bench-rows, as its tower, ttft, graphs and sample steps do
# (the fixture has 3 decoder layers, the implied figure is for those)
EMU_BENCH_OUT := $(EMU_BUILD)/bench/bench-cuda-emu.out

.PHONY: bench-cuda-emu
bench-cuda-emu: $(EMU_BENCHES) $(EMU_BUILD)/tests/test_cuda_sample
	@cd $(ROOT) && { \
	    $(EMU_BUILD)/bench/bench_tower --backend cuda --device-mib 256 \
	        --model tests/fixtures/models/qwen25vl-bf16 \
	        --size 224x224 --size 448x252 --size 224x224x3 && \
	    for c in on,bf16,1024 off,bf16,1024 on,f32,1024 on,bf16,256; do \
	        a=$${c#*,}; \
	        VLM_CUDA_FUSE=$${c%%,*} VLM_CUDA_ACT=$${a%,*} \
	        $(EMU_BUILD)/bench/bench_engine --backend cuda --device-mib 256 \
	            --model tests/fixtures/models/qwen25vl-bf16 --threads 2 \
	            --grid 0,0 --prompt 512 --decode 0 --streams 1 --reps 1 \
	            --prefill-rows $${c##*,} || exit 1; \
	    done && \
	    for g in off on; do \
	        $(EMU_BUILD)/bench/bench_engine --backend cuda --device-mib 256 \
	            --model tests/fixtures/models/qwen25vl-bf16 --threads 2 \
	            --grid 0,0 --prompt 32 --decode 4 --streams 1,16 --reps 1 \
	            --cuda-graphs $$g || exit 1; \
	    done && \
	    $(EMU_BUILD)/bench/bench_engine --backend cuda --device-mib 256 \
	        --model tests/fixtures/models/qwen25vl-bf16 --threads 2 \
	        --grid 0,0 --prompt 64 --decode 2 --streams 16,64 --reps 1 \
	        --cuda-graphs on --contexts distinct && \
	    $(EMU_BUILD)/tests/test_cuda_sample --bench-sample 1; \
	 } > $(EMU_BENCH_OUT) 2>&1 || { cat $(EMU_BENCH_OUT); exit 1; }; \
	 FULL_LAYERS=3 scripts/gpu-check --bench-rows $(EMU_BENCH_OUT)

.PHONY: test-cuda-emu
test-cuda-emu: $(EMU_TESTS) $(EMU_ENGINE) module engine
	@cd $(ROOT) && TEST_NGINX_BINARY=$(NGINX) \
	    TEST_NGINX_LOAD_MODULES=$(MODULE) VLM_BUILD=$(BUILD) \
	    VLM_CUDAEMU_BUILD=$(EMU_BUILD) \
	    UNIT_LABEL=cuda-emu UNIT_SKIP_FAILS=1 UNIT_JOBS=$(NPROC) \
	    $(ROOT)/scripts/run-unit \
	    $(EMU_TESTS) $(EMU_SUITES)

# make soak-cuda-emu: steady image traffic through two ranks on the
# emulated device (scripts/soak-cuda): REQUESTS requests of 7 pictures
# of 1120x700, with the device pool and with every picture through the
# host staging area; every rank's GPU memory the same after the first
# 100 requests and at the end.  About 0.65 s of CPU a request here;
# make test runs 200 a run.
REQUESTS ?= 2000

.PHONY: soak-cuda-emu
soak-cuda-emu: $(EMU_ENGINE) module engine
	@cd $(ROOT) && TEST_NGINX_BINARY=$(NGINX) \
	    TEST_NGINX_LOAD_MODULES=$(MODULE) VLM_BUILD=$(BUILD) \
	    VLM_CUDAEMU_BUILD=$(EMU_BUILD) $(ROOT)/scripts/soak-cuda \
	    --requests $(REQUESTS)

# the OpenAI Python SDK for t/009-openai-sdk.t; without PyPI the suite is
# skipped, which is why make test goes on when this fails
VENV_TEST := $(BUILD)/venv-test

venv-test: $(VENV_TEST)/.installed

$(VENV_TEST)/.installed: tests/requirements-sdk.txt
	@test -x $(VENV_TEST)/bin/python || $(PYTHON) -m venv $(VENV_TEST)
	$(VENV_TEST)/bin/pip install -q -r tests/requirements-sdk.txt
	@touch $@

LOAD_REQUESTS    ?= 1000
LOAD_CONCURRENCY ?= 16
LOAD_PORT        ?= 1994

load: all
	cd $(ROOT) && TEST_NGINX_BINARY=$(NGINX) \
	    TEST_NGINX_LOAD_MODULES=$(MODULE) VLM_BUILD=$(BUILD) \
	    perl -I$(ROOT)/t/lib bench/load.pl --requests $(LOAD_REQUESTS) \
	    --concurrency $(LOAD_CONCURRENCY) --port $(LOAD_PORT)

load-images: all
	cd $(ROOT) && TEST_NGINX_BINARY=$(NGINX) \
	    TEST_NGINX_LOAD_MODULES=$(MODULE) VLM_BUILD=$(BUILD) \
	    perl -I$(ROOT)/t/lib bench/load.pl --workload images \
	    --requests 2000 --warmup 1000 --concurrency $(LOAD_CONCURRENCY) \
	    --port $(LOAD_PORT) $(if $(TP),--tensor-parallel $(TP))

run: deps
	$(MAKE) -j$(NPROC) all
	@$(ROOT)/scripts/serve $(PORT)

# make install: the module where nginx loads modules from (nginx -V's
# --modules-path), vlm-engine beside it (the module starts the engine it
# finds next to itself), vlm-cli in BINDIR, and under DATADIR the default
# model, a sample nginx.conf that serves it and mod-http-vlm.conf, the
# load_module line for /etc/nginx/modules-enabled.  DESTDIR stages it all.
PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
DATADIR   ?= $(PREFIX)/share/ngx_http_vlm_module
NGX_MODULES_PATH ?= $(or $(shell $(NGINX) -V 2>&1 | \
                        sed -n 's/.*--modules-path=\([^ ]*\).*/\1/p'), \
                        /usr/lib/nginx/modules)
DESTDIR   ?=

.PHONY: install
install: all
	install -d $(DESTDIR)$(NGX_MODULES_PATH) $(DESTDIR)$(BINDIR) \
	    $(DESTDIR)$(DATADIR)/models/default
	install -m 644 $(MODULE) $(DESTDIR)$(NGX_MODULES_PATH)/
	install -m 755 $(ENGINE) $(DESTDIR)$(NGX_MODULES_PATH)/
	install -m 755 $(CLI) $(DESTDIR)$(BINDIR)/
	install -m 644 models/default/* $(DESTDIR)$(DATADIR)/models/default/
	printf 'load_module %s;\n' \
	    $(NGX_MODULES_PATH)/ngx_http_vlm_module.so \
	    > $(DESTDIR)$(DATADIR)/mod-http-vlm.conf
	{ echo "# ngx_http_vlm_module: a sample configuration serving the"; \
	  echo "# default model (make install).  Relative paths are relative"; \
	  echo "# to nginx's prefix (nginx -p)."; echo; \
	  echo "load_module $(NGX_MODULES_PATH)/ngx_http_vlm_module.so;"; \
	  sed -e '1,/^$$/d' \
	      -e 's|^\([[:space:]]*vlm_model[[:space:]]\{1,\}\)[^;]*;|\1$(DATADIR)/models/default;|' \
	      conf/nginx.conf; } > $(DESTDIR)$(DATADIR)/nginx.conf
	@echo "installed: $(NGX_MODULES_PATH)/ngx_http_vlm_module.so," \
	    "vlm-engine beside it, $(BINDIR)/vlm-cli, $(DATADIR)/"

# the tokenizer first: the serving and model fixtures copy the one it writes
fixtures: $(QWEN_TOKENIZER)
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r tools/requirements.txt
	cd $(ROOT) && for s in tools/fixtures_tokenizer.py \
	    $(filter-out tools/fixtures_quant.py tools/fixtures_tokenizer.py, \
	    $(wildcard tools/fixtures_*.py)); do \
	    echo "== $$s"; $(VENV)/bin/python $$s || exit 1; done
	$(MAKE) fixtures-quant

# the quantized checkpoints, packed by AutoAWQ, AutoGPTQ and
# compressed-tensors (tools/requirements-quant.txt), in a venv of their own
VENV_QUANT ?= $(ROOT)/.venv-quant

.PHONY: fixtures-quant
fixtures-quant:
	@test -x $(VENV_QUANT)/bin/python || $(PYTHON) -m venv $(VENV_QUANT)
	$(VENV_QUANT)/bin/pip install -q -r tools/requirements-quant.txt
	$(VENV_QUANT)/bin/pip install -q --no-deps autoawq==0.2.9 \
	    auto-gptq==0.7.1
	cd $(ROOT) && $(VENV_QUANT)/bin/python tools/fixtures_quant.py

# Train models/default (a tiny Qwen2-VL on synthetic shapes, CPU, one
# thread, about 26 minutes) and write its held-out set and drawn examples
# to tests/fixtures/default_model; not part of make test.
.PHONY: default-model
default-model:
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r tools/requirements.txt
	cd $(ROOT) && $(VENV)/bin/python tools/train_default_model.py

# AddressSanitizer + UBSan builds in build-asan/: any finding aborts the
# process that hit it (UBSan does not recover), so it fails its test
ASAN_BUILD := $(ROOT)/build-asan
ASAN_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
              -fno-omit-frame-pointer
ASAN_MAKE  := $(MAKE) BUILD=$(ASAN_BUILD) OPT=-O1 SAN="$(ASAN_SAN)"

asan:
	UNIT_JOBS=$(NPROC) $(ASAN_MAKE) unit
	$(ASAN_MAKE) fuzz-seeds

# the emulated CUDA suite under ASan + UBSan (build-asan-cudaemu/): an
# out-of-bounds access in a kernel, in the emulated runtime or in the
# backend's host code is reported where it happens; the emulator's tests
# and the op, attention and sampling tests, every kernel at many shapes
# (about a minute on 2 cores; ASAN_EMU_SKIP=test_model_*_bf16 adds the
# model tests of test_cuda_models and the f32 model families of
# test_cuda_qwen and test_cuda_parity, about 3 minutes more)
ASAN_EMU_BUILD := $(ROOT)/build-asan-cudaemu
ASAN_EMU_SKIP  ?= test_model_*

ASAN_EMU_TESTS := $(ASAN_EMU_BUILD)/$(EMU_DIR)/test_cudaemu \
                  $(CUDA_OPS_TESTS:tests/%.c=$(ASAN_EMU_BUILD)/tests/%)

asan-cuda-emu:
	$(ASAN_MAKE) EMU_BUILD=$(ASAN_EMU_BUILD) $(ASAN_EMU_TESTS)
	@cd $(ROOT) && VLM_TEST_SKIP='$(ASAN_EMU_SKIP)' \
	    UNIT_LABEL=asan-cuda-emu UNIT_JOBS=$(NPROC) \
	    $(ROOT)/scripts/run-unit $(ASAN_EMU_TESTS)

# the emulated op tests under ThreadSanitizer (build-tsan-cudaemu/): the
# kernels and the backend's host code are instrumented, the engine
# library is make all's; the emulated runtime is not instrumented, and
# tells ThreadSanitizer what CUDA orders (a block's start and end,
# __syncthreads, __syncwarp; not shuffles, votes or the warp matrix
# functions), so that two threads of a block that touch the same memory
# with none of those between them are reported, as CUDA's racecheck
# would, even where the fibers' order gives the right sums.  The first
# report fails the test; test_racecheck plants races and checks that each
# is reported.  The tests leave out their largest shapes and run one host
# thread (VLM_TEST_RACECHECK, tests/cuda_test.h).  BUILD is build-tsan/
# only so that nothing is built into build/ with these flags.
# RACECHECK_MODELS=1 adds the model tests (test_cuda_models, _qwen,
# _parity), whose engines run their own thread pools: it builds the
# engine library with ThreadSanitizer too (build-tsan/, the tests in
# build-tsan-models/; 4.6 minutes in all on 2 cores, the library built)
TSAN_EMU_BUILD := $(ROOT)/build-tsan-$(if $(RACECHECK_MODELS),models,cudaemu)
TSAN_MAKE      := $(MAKE) BUILD=$(ROOT)/build-tsan OPT=-O1 \
                  SAN="-fsanitize=thread -fno-omit-frame-pointer" \
                  EMU_RT_SAN= EMU_DEFS=-DCUDAEMU_RACECHECK=1 \
                  EMU_BUILD=$(TSAN_EMU_BUILD) \
                  $(if $(RACECHECK_MODELS),,EMU_LIB=$(LIB))
TSAN_EMU_SKIP  ?= $(if $(RACECHECK_MODELS),,test_model_*)
TSAN_EMU_TESTS := $(TSAN_EMU_BUILD)/$(EMU_DIR)/test_racecheck \
                  $(TSAN_EMU_BUILD)/tests/test_backend_ops \
                  $(TSAN_EMU_BUILD)/tests/test_cuda_attn \
                  $(TSAN_EMU_BUILD)/tests/test_cuda_sample \
                  $(if $(RACECHECK_MODELS), \
                       $(TSAN_EMU_BUILD)/tests/test_cuda_models \
                       $(TSAN_EMU_BUILD)/tests/test_cuda_qwen \
                       $(TSAN_EMU_BUILD)/tests/test_cuda_parity)

# without address randomization where setarch may turn it off: gcc 12's
# ThreadSanitizer does not start under a kernel that randomizes mmap with
# more bits than it expects (vm.mmap_rnd_bits 32)
TSAN_NORAND = $(shell setarch $$(uname -m) -R true 2>/dev/null \
                      && echo setarch $$(uname -m) -R)

.PHONY: racecheck-cuda-emu
racecheck-cuda-emu: lib
	$(TSAN_MAKE) $(TSAN_EMU_TESTS)
	@cd $(ROOT) && VLM_TEST_SKIP='$(TSAN_EMU_SKIP)' \
	    TSAN_OPTIONS="halt_on_error=1 $(TSAN_OPTIONS)" VLM_TEST_RACECHECK=1 \
	    UNIT_LABEL=racecheck-cuda-emu UNIT_JOBS=$(NPROC) \
	    $(TSAN_NORAND) $(ROOT)/scripts/run-unit $(TSAN_EMU_TESTS)

# The module, the engine and vlm-cli with ASan + UBSan, against Debian's
# nginx binary (not instrumented: nginx-dev ships headers only): the
# sanitizer runtime must be the first library of the process, so nginx
# runs through build-asan/nginx-asan, which preloads libasan.  The engine
# is an ASan executable of its own.  ASan's reports go to
# build-asan/sanitizer/ (the engine's too), UBSan's to error.log (it
# reads its options only at its first report, when nginx has replaced
# the worker's environment); either aborts the process that hit it, which
# fails the test that sent the request, and any report fails the run.
#   make asan-nginx   every t/ suite, then the HTTP fuzzer
#                     (fuzz/http_fuzz.pl, HTTP_FUZZ_REQUESTS requests)
#   make asan-fuzz    the HTTP fuzzer only (make test: a short run)
HTTP_FUZZ_REQUESTS ?= 20000
HTTP_FUZZ_SECONDS  ?= 0
HTTP_FUZZ_SEED     ?= 1
# the suites' waits for a whole answer (t/lib/VLMTest.pm vlm_secs): an
# ASan engine generates several times slower
ASAN_TIME_SCALE ?= 4
ASAN_NGINX    := $(ASAN_BUILD)/nginx-asan
ASAN_REPORTS  := $(ASAN_BUILD)/sanitizer
ASAN_ENV      := TEST_NGINX_BINARY=$(ASAN_NGINX) \
                 TEST_NGINX_LOAD_MODULES=$(ASAN_BUILD)/ngx_http_vlm_module.so \
                 VLM_BUILD=$(ASAN_BUILD) VLM_SANITIZER_LOGS=$(ASAN_REPORTS) \
                 VLM_TIME_SCALE=$(ASAN_TIME_SCALE)
HTTP_FUZZ     := perl -I$(ROOT)/t/lib fuzz/http_fuzz.pl \
                 --requests $(HTTP_FUZZ_REQUESTS) \
                 --seconds $(HTTP_FUZZ_SECONDS) --seed $(HTTP_FUZZ_SEED)
ASAN_CHECK    := if ls $(ASAN_REPORTS)/* >/dev/null 2>&1; then \
                     head -n 40 $(ASAN_REPORTS)/*; \
                     echo "sanitizer reports in $(ASAN_REPORTS)"; exit 1; fi

.PHONY: asan-nginx asan-fuzz asan-nginx-build

asan-nginx-build:
	$(ASAN_MAKE) -j$(NPROC) all
	@printf '%s\n' '#!/bin/sh' \
	    '# nginx with the ASan runtime loaded first (make asan-nginx)' \
	    'export LD_PRELOAD="$(shell $(CC) -print-file-name=libasan.so)"' \
	    'export ASAN_OPTIONS="detect_leaks=0:log_path=$(ASAN_REPORTS)/nginx"' \
	    'exec $(NGINX) "$$@"' > $(ASAN_NGINX)
	@chmod +x $(ASAN_NGINX)
	@rm -rf $(ASAN_REPORTS) && mkdir -p $(ASAN_REPORTS)

# t/010 measures the processes' RSS, which ASan's quarantine and shadow
# memory make grow by design: the fuzzer checks the pools instead
ASAN_SUITES   := $(filter-out t/010-load.t,$(sort $(wildcard t/*.t)))

asan-nginx: asan-nginx-build
	cd $(ROOT) && $(ASAN_ENV) prove -I$(ROOT)/t/lib $(ASAN_SUITES)
	cd $(ROOT) && $(ASAN_ENV) $(HTTP_FUZZ)
	@$(ASAN_CHECK)

asan-fuzz: asan-nginx-build
	cd $(ROOT) && $(ASAN_ENV) $(HTTP_FUZZ)
	@$(ASAN_CHECK)

bench-build: $(BENCHES)

bench: $(BENCHES) $(QWEN_TOKENIZER)
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

# libFuzzer harness of the OpenAI API layer (clang; not part of make test):
# FUZZ_TIME seconds from the seeds in fuzz/corpus/openai, the grown corpus
# kept in build-fuzz/
FUZZ_CC   ?= clang
FUZZ_TIME ?= 60
FUZZ_OUT  := $(ROOT)/build-fuzz

fuzz-openai:
	@mkdir -p $(FUZZ_OUT)/corpus-openai
	$(FUZZ_CC) -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -DVLM_OPENAI_ELIDE_MIN=4 \
	    $(CPPFLAGS) \
	    fuzz/fuzz_openai.c $(wildcard src/api/vlm_openai*.c) \
	    $(wildcard src/api/vlm_schema*.c) $(wildcard src/api/vlm_regex*.c) \
	    src/api/vlm_gbnf.c \
	    $(wildcard src/grammar/vlm_*.c) \
	    src/core/vlm_common.c $(wildcard src/text/vlm_*.c) \
	    -o $(FUZZ_OUT)/fuzz_openai -ljansson -lpcre2-8 -lutf8proc -lxxhash -lm
	$(FUZZ_OUT)/fuzz_openai -max_total_time=$(FUZZ_TIME) \
	    -dict=fuzz/openai.dict -max_len=4096 \
	    $(FUZZ_OUT)/corpus-openai fuzz/corpus/openai

# each fuzz/fuzz_<name>.c is a libFuzzer target over the engine sources,
# seeded from tests/fixtures/<name>/in when that exists.  The sources are
# compiled once into an archive, of which a target links what it needs;
# the backends' kernels are left out (no target reaches them, and the
# sanitizers take clang many minutes over their intrinsics)
FUZZ_BUILD   := $(ROOT)/build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SRCS    := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -g -O1 -Wall -Wextra -Werror -Wno-unused-parameter \
                $(FUZZ_SAN)
FUZZ_LIB     := $(FUZZ_BUILD)/libvlm.a
FUZZ_OBJS    := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o, \
                    $(filter-out src/backend/%,$(LIB_SRCS)))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(CPPFLAGS) -MMD -MP \
	    -c -o $@ $<

-include $(wildcard $(FUZZ_OBJS:.o=.d))

$(FUZZ_LIB): $(FUZZ_OBJS)
	@rm -f $@
	ar rcs $@ $^

fuzz: $(QWEN_TOKENIZER) $(FUZZ_LIB)
	@command -v clang >/dev/null || { echo "make fuzz needs clang"; exit 1; }
	@for f in $(FUZZ_SRCS); do \
	    n=$$(basename $$f .c); t=$${n#fuzz_}; \
	    echo "== $$n: $(FUZZ_SECONDS) s"; \
	    clang $(FUZZ_CFLAGS) -fsanitize=fuzzer $(CPPFLAGS) \
	        -o $(FUZZ_BUILD)/$$n $$f $(FUZZ_LIB) $(LDLIBS) || exit 1; \
	    mkdir -p $(FUZZ_BUILD)/corpus-$$t; \
	    if [ -d tests/fixtures/$$t/in ]; then \
	        cp tests/fixtures/$$t/in/* $(FUZZ_BUILD)/corpus-$$t/; fi; \
	    $(FUZZ_BUILD)/$$n -max_total_time=$(FUZZ_SECONDS) -max_len=262144 \
	        -rss_limit_mb=2048 -print_final_stats=1 \
	        $(FUZZ_BUILD)/corpus-$$t > $(FUZZ_BUILD)/$$n.log 2>&1 \
	        || { tail -40 $(FUZZ_BUILD)/$$n.log; exit 1; }; \
	    grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done" \
	        $(FUZZ_BUILD)/$$n.log; \
	done

# the targets that have seeds (tests/fixtures/<name>/in, fuzz/corpus/
# <name>), each built without libFuzzer (fuzz/standalone.c) and given its
# seeds once: make test runs them under ASan and UBSan (make fuzz-seeds
# in the ASan build)
fuzz_seeds    = $(wildcard tests/fixtures/$(1)/in fuzz/corpus/$(1))
FUZZ_SEEDED  := $(foreach f,$(FUZZ_SRCS), \
                    $(if $(call fuzz_seeds,$(f:fuzz/fuzz_%.c=%)),$(f)))
FUZZ_RUNNERS := $(FUZZ_SEEDED:fuzz/%.c=$(BUILD)/fuzz/%)

$(FUZZ_RUNNERS): $(BUILD)/fuzz/%: fuzz/%.c fuzz/standalone.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(CPPFLAGS) -o $@ $< fuzz/standalone.c \
	    $(LIB) $(LDLIBS)

.PHONY: fuzz-seeds
fuzz-seeds: $(FUZZ_RUNNERS) $(QWEN_TOKENIZER)
	@cd $(ROOT) && $(foreach r,$(FUZZ_RUNNERS),$(r) \
	    $(call fuzz_seeds,$(r:$(BUILD)/fuzz/fuzz_%=%)) &&) true

clean:
	rm -rf $(BUILD) $(CUDA_BUILD) $(EMU_BUILD) $(ROOT)/build-asan $(ROOT)/build-fuzz t/servroot*
