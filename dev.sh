#!/usr/bin/env bash
# libbft developer entry point. Installs what is missing (apt packages, a Python virtual
# environment), configures and builds incrementally, then runs what was asked:
#   ./dev.sh run [args]   the main job: `bft replay` (trace replay) with the built-in default
#   ./dev.sh test [args]  every C++ (ctest/GoogleTest) and Python (pytest) test; args go to pytest
#   ./dev.sh test --quick the fast loop: the same without the Python tests marked runtime, slurm or
#                         slow (the end-to-end runtime runs and the Slurm test cluster)
#   ./dev.sh build        set up and build everything (library, tests, Python module)
#   ./dev.sh test-packages install the system packages that only tests need (a Prometheus server)
#   ./dev.sh asan         the C++ suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#   ./dev.sh fuzz         the libFuzzer targets (clang), each for BFT_FUZZ_SECONDS (default 30)
#   ./dev.sh bench [args] the Google Benchmark programs in bench/ (args go to each program)
#   ./dev.sh wheel        `pip install .` into a fresh virtual environment and solve a small MILP
#   ./dev.sh slurm-demo   an 8-node Slurm test cluster, a main-queue workload and two training jobs;
#                         --hosts N: across N compute hosts and a login host (network namespaces);
#                         --resize inplace|relaunch; --step-s S: paced steps (scaling as on real nodes)
#   ./dev.sh format       reformat the C++ sources (clang-format) and apply ruff's safe fixes to the
#                         Python ones; format-check only checks, with clang-format and ruff
# Environment: BFT_BUILD_DIR (default build/dev), BFT_JOBS (default: number of cores),
# BFT_TEST_WORKERS (pytest processes, default 2; 1 runs the Python tests in one process).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
BUILD_DIR="${BFT_BUILD_DIR:-build/dev}"
JOBS="${BFT_JOBS:-$(nproc)}"
TEST_WORKERS="${BFT_TEST_WORKERS:-2}"
if ! [[ "$TEST_WORKERS" =~ ^[1-9][0-9]*$ ]]; then  # checked first: before minutes of building
  echo "dev.sh: BFT_TEST_WORKERS must be a positive whole number, got '$TEST_WORKERS'" >&2
  exit 2
fi
APT_PACKAGES=(g++ pkg-config libglpk-dev libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
              coinor-libcbc-dev zlib1g-dev nlohmann-json3-dev clang-format)
# Only some tests need these: a real Prometheus server scrapes the manager's metrics
# (tests/python/test_runtime_metrics.py runs `./dev.sh test-packages` when it is missing).
APT_TEST_PACKAGES=(prometheus)
# torch is pinned: 2.13.0 is a CPU build that pip finds on this project's machines; an unpinned
# torch pulls gigabytes of CUDA packages. scikit-learn ships the runtime examples' dataset.
PY_PACKAGES=("cmake>=3.22" ninja "pybind11>=2.12" "scikit-build-core>=0.10" "numpy>=1.22" scipy
             matplotlib "pytest>=7" "pytest-xdist>=3.5" hypothesis "torch==2.13.0" scikit-learn ruff prometheus-client)

log() { printf '\033[1m[dev.sh]\033[0m %s\n' "$*" >&2; }

ensure_apt() {
  local missing=()
  local wanted=("${APT_PACKAGES[@]}" "$@")
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing system packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_venv() {
  local stamp="$VENV/.bft-packages"
  local want="${PY_PACKAGES[*]}"
  if [ -x "$PY" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  log "setting up the Python environment in .venv"
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
  echo "$want" >"$stamp"
}

setup() {
  ensure_apt
  ensure_venv
  export PATH="$VENV/bin:$PATH"
}

# configure <build dir> [extra cmake args]: configure once; later builds are incremental.
configure() {
  local dir="$1"; shift
  [ -f "$dir/build.ninja" ] && return
  log "configuring $dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBFT_BUILD_TESTS=ON \
    -DBFT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" \
    "$@" >/dev/null
}

build() {
  local dir="$1"; shift
  cmake --build "$dir" -j "$JOBS" "$@"
}

# .venv/bin/bft runs the development build, so the README's runtime lines work as written.
console_script() {
  printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" -m bft "$@"\n' \
    "$ROOT/$BUILD_DIR/python" "$PY" >"$VENV/bin/bft"
  chmod +x "$VENV/bin/bft"
}

run_pytest() {
  # pytest exits 5 when it collects nothing; that is a failure of the suite, not a pass.
  # Two processes by default: the end-to-end tests mostly wait on real processes, so two of them
  # overlap well even on 2 cores; the Slurm tests stay in one process (conftest.py, xdist_group).
  # --durations names the slowest tests, so that CI's time can be kept within its budget.
  local parallel=()
  [ "$TEST_WORKERS" -gt 1 ] && parallel=(-n "$TEST_WORKERS" --dist loadgroup)
  PYTHONPATH="$ROOT/$BUILD_DIR/python" "$PY" -m pytest -q --durations=20 "${parallel[@]}" tests/python "$@"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  run)
    setup; configure "$BUILD_DIR"; build "$BUILD_DIR" --target bft_python
    PYTHONPATH="$ROOT/$BUILD_DIR/python" "$PY" -m bft replay "$@"
    ;;
  build)
    setup; configure "$BUILD_DIR"; build "$BUILD_DIR"; console_script
    ;;
  test)
    quick=()
    if [ "${1:-}" = --quick ]; then
      shift
      quick=(-m "not runtime and not slurm and not slow")
    fi
    ensure_apt "${APT_TEST_PACKAGES[@]}"
    setup; configure "$BUILD_DIR"; build "$BUILD_DIR"; console_script
    log "C++ tests (ctest)"
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
    log "Python tests (pytest${quick:+, without the runtime, slurm and slow markers})"
    run_pytest "${quick[@]}" "$@"
    ;;
  test-packages)
    ensure_apt "${APT_TEST_PACKAGES[@]}"
    ;;
  asan)
    setup; BUILD_DIR=build/asan
    configure "$BUILD_DIR" -DBFT_SANITIZE=ON -DBFT_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
    build "$BUILD_DIR"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      LSAN_OPTIONS=suppressions="$ROOT/cmake/lsan.supp" ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -E '^package\.'
    ;;
  bench)
    setup; BUILD_DIR=build/bench
    configure "$BUILD_DIR" -DBFT_BUILD_BENCH=ON -DBFT_BUILD_TESTS=OFF -DBFT_BUILD_PYTHON=ON
    build "$BUILD_DIR"
    for b in "$BUILD_DIR"/bench/bench_*; do [ -x "$b" ] && "$b" "$@"; done
    ;;
  wheel)
    setup
    tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
    python3 -m venv "$tmp/venv"
    log "pip install . into a fresh virtual environment"
    "$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check .
    (cd "$tmp" && "$tmp/venv/bin/python" "$ROOT/examples/python/milp_smoke.py")
    ;;
  slurm-demo)
    setup; configure "$BUILD_DIR"; build "$BUILD_DIR" --target bft_python
    PYTHONPATH="$ROOT/$BUILD_DIR/python" "$PY" examples/runtime/slurm_demo.py "$@"
    ;;
  fuzz)
    # The whole library is built with clang and instrumented (coverage, ASan, UBSan); each target
    # runs for a bounded time on a corpus seeded from tests/fuzz/seeds and ../shared/data.
    ensure_apt clang libclang-rt-14-dev
    setup; BUILD_DIR=build/fuzz
    configure "$BUILD_DIR" -DCMAKE_CXX_COMPILER=clang++ -DBFT_BUILD_FUZZERS=ON -DBFT_BUILD_PYTHON=OFF \
      -DBFT_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
    build "$BUILD_DIR"
    seconds="${BFT_FUZZ_SECONDS:-30}"
    shared="$ROOT/../shared/data"
    for target in fuzz_trace_reader fuzz_jobs_reader fuzz_json fuzz_log_importers fuzz_lp_roundtrip; do
      [ -x "$BUILD_DIR/tests/fuzz/$target" ] || continue
      corpus="$BUILD_DIR/corpus/$target"
      mkdir -p "$corpus"
      seeds="$ROOT/tests/fuzz/seeds/${target#fuzz_}"
      [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
      if [ -d "$shared" ]; then  # the first lines of the real data, as seeds
        case "$target" in
          fuzz_trace_reader) zcat "$shared"/summit-idle-nodes-2021-02.csv.gz 2>/dev/null | head -50 >"$corpus/summit-head" || true ;;
          fuzz_jobs_reader) for f in "$shared"/jobs-*.jsonl; do head -3 "$f" >"$corpus/$(basename "$f")-head"; done ;;
          fuzz_json) for f in "$shared"/jobs-*.jsonl; do head -1 "$f" >"$corpus/$(basename "$f")-line"; done ;;
        esac
      fi
      log "fuzzing $target for ${seconds} s"
      ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions="$ROOT/cmake/lsan.supp" \
        "$BUILD_DIR/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$BUILD_DIR/corpus/$target-" "$corpus"
    done
    ;;
  format|format-check)
    setup
    mapfile -t files < <(git ls-files '*.cpp' '*.h' | grep -v '^\.')
    mapfile -t py_files < <(git ls-files '*.py' | grep -v '^\.')
    # ruff reads its rules from pyproject.toml; `format` applies the fixes ruff calls safe and lists
    # the findings left to fix by hand (format-check fails on them).
    if [ "$cmd" = format ]; then
      clang-format -i "${files[@]}"
      "$VENV/bin/ruff" check --fix --exit-zero "${py_files[@]}"
    else
      clang-format --dry-run --Werror "${files[@]}"
      "$VENV/bin/ruff" check "${py_files[@]}"
    fi
    ;;
  *)
    sed -n '2,/^[^#]/p' "$0" | sed -n 's/^# \{0,1\}//p'  # the comment block at the top
    [ -z "$cmd" ] && exit 0 || exit 2
    ;;
esac
