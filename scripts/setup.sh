#!/usr/bin/env bash
# Sets up .venv for det-estimator: TensorFlow 2.15 (CPU), det-estimator itself (editable,
# with its dev extra) and Horovod 0.28.1 compiled against that TensorFlow with Gloo.
#
# Idempotent: on a ready machine it only checks the environment and returns. Environment:
#   PYTHON      interpreter to build the venv from (default: first of python3.11, 3.10, 3.9, python3);
#               a venv of another Python version is recreated with it
#   DET_VENV    where the virtual environment lives (default: .venv)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${DET_VENV:-.venv}"
HOROVOD_VERSION="0.28.1"
STAMP="$VENV/.det-estimator-setup"

step() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

python_is_supported() {
    "$1" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 11) else 1)' 2>/dev/null
}

python_version() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}

find_python() {
    local candidates=(python3.11 python3.10 python3.9 python3)
    if [[ -n "${PYTHON:-}" ]]; then candidates=("$PYTHON"); fi
    for candidate in "${candidates[@]}"; do
        if command -v "$candidate" >/dev/null 2>&1 && python_is_supported "$candidate"; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# The stamp records what the environment was built from; a change to any of these files
# rebuilds (the C file is compiled into the editable install, and the version file gives
# the installed metadata its version).
setup_fingerprint() {
    cat setup.py scripts/setup.sh det_estimator/_version.py det_estimator/reducers/*.c | sha256sum | cut -d' ' -f1
}

horovod_is_ready() {
    local report
    report="$("$VENV/bin/horovodrun" --check-build 2>/dev/null)" || return 1
    grep -q '\[X\] TensorFlow' <<<"$report" && grep -q '\[X\] Gloo' <<<"$report"
}

# The Python PYTHON names wins over the venv's: a venv of another version is rebuilt.
if [[ -n "${PYTHON:-}" ]]; then
    python_is_supported "$PYTHON" || die "PYTHON=$PYTHON is not a Python 3.9, 3.10 or 3.11 \
(TensorFlow 2.15, the last release with tf.estimator, supports no other)."
    wanted="$(python_version "$PYTHON")"
    if [[ -x "$VENV/bin/python" ]] && [[ "$(python_version "$VENV/bin/python")" != "$wanted" ]]; then
        step "$VENV has Python $(python_version "$VENV/bin/python"), PYTHON=$PYTHON is $wanted: recreating it"
        rm -rf "$VENV"
    fi
fi

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(setup_fingerprint)" ]] && horovod_is_ready; then
    step "environment in $VENV is up to date"
    exit 0
fi

if [[ -x "$VENV/bin/python" ]] && ! python_is_supported "$VENV/bin/python"; then
    step "$VENV has an unsupported Python; recreating it"
    rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    PYTHON_BIN="$(find_python)" || die "det-estimator needs Python 3.9, 3.10 or 3.11 \
(TensorFlow 2.15, the last release with tf.estimator, supports no other). \
None was found on PATH${PYTHON:+ (PYTHON=$PYTHON is not one of them)}; install one or set PYTHON."
    step "creating $VENV with $("$PYTHON_BIN" --version 2>&1)"
    "$PYTHON_BIN" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

step "installing build tools, TensorFlow 2.15 (CPU) and det-estimator[cpu,dev]"
"${PIP[@]}" install --quiet cmake wheel setuptools packaging
"${PIP[@]}" install --quiet -e ".[cpu,dev]"

if horovod_is_ready; then
    step "Horovod is already built with TensorFlow and Gloo"
else
    log="$VENV/horovod-build.log"
    step "building Horovod $HOROVOD_VERSION against TensorFlow with Gloo (about 4 minutes on 2 cores; log: $log)"
    # --no-build-isolation: Horovod must compile against the TensorFlow in this venv.
    # pip's cache stays on, so a later set-up on this machine reuses the built wheel.
    if ! HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
        HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
        "${PIP[@]}" install --no-build-isolation "horovod==$HOROVOD_VERSION" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "building Horovod failed; the full log is $log"
    fi
fi

if ! "$VENV/bin/python" -c 'import det_estimator.reducers._ranking_kernels' 2>/dev/null; then
    step "warning: the native ranking kernels did not build (is a C compiler installed?); \
RocAuc and AveragePrecision use NumPy instead, several times slower"
fi
if ! horovod_is_ready; then
    "$VENV/bin/horovodrun" --check-build >&2 || true
    die "horovodrun --check-build does not list both TensorFlow and Gloo"
fi
setup_fingerprint >"$STAMP"
step "ready: $("$VENV/bin/python" --version 2>&1), TensorFlow $("$VENV/bin/python" -c \
    'import tensorflow as tf; print(tf.__version__)' 2>/dev/null), Horovod $HOROVOD_VERSION (TensorFlow, Gloo)"
