#!/usr/bin/env bash
# Sets up a virtual environment for det-estimator on one of its two stacks (STACK):
#
#   estimator (default)  .venv: TensorFlow 2.15 (CPU) with tf.estimator, det-estimator itself
#                        (editable, with its dev extra) and Horovod 0.28.1 compiled against that
#                        TensorFlow with Gloo; Python 3.9 to 3.11.
#   current              .venv-current: TensorFlow 2.21 (CPU) with Keras 3 and tf-keras 2.21,
#                        det-estimator (editable, dev extra); no Horovod and no tf.estimator
#                        (multi-worker runs use TensorFlow's MultiWorkerMirroredStrategy);
#                        Python 3.10 to 3.13, 3.12 first, found on PATH or among pyenv's versions.
#
# Idempotent: on a ready machine it only checks the environment and returns. Environment:
#   STACK       estimator or current (default: estimator)
#   PYTHON      interpreter to build the venv from (default: the stack's first found, see above);
#               a venv of another Python version is recreated with it
#   DET_VENV    where the virtual environment lives (default: .venv, or .venv-current for STACK=current)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
STACK="${STACK:-estimator}"
HOROVOD_VERSION="0.28.1"
CURRENT_TENSORFLOW_VERSION="2.21.0"

step() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

case "$STACK" in
    estimator)
        VENV="${DET_VENV:-.venv}"
        MIN_MINOR=9 MAX_MINOR=11
        PREFERRED=(3.11 3.10 3.9)
        SUPPORTED="a Python 3.9, 3.10 or 3.11"
        WHY="TensorFlow 2.15, the last release with tf.estimator, supports no other"
        ;;
    current)
        VENV="${DET_VENV:-.venv-current}"
        MIN_MINOR=10 MAX_MINOR=13
        PREFERRED=(3.12 3.13 3.11 3.10)
        SUPPORTED="a Python 3.10, 3.11, 3.12 or 3.13"
        WHY="TensorFlow $CURRENT_TENSORFLOW_VERSION supports no other"
        ;;
    *) die "STACK=$STACK is neither estimator (TensorFlow 2.15, tf.estimator, Horovod) nor current (TensorFlow $CURRENT_TENSORFLOW_VERSION, Keras 3)." ;;
esac
STAMP="$VENV/.det-estimator-setup"

python_is_supported() {
    "$1" -c "import sys; sys.exit(0 if (3, $MIN_MINOR) <= sys.version_info[:2] <= (3, $MAX_MINOR) else 1)" 2>/dev/null
}

python_version() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}

# pythonX.Y on PATH, else one of pyenv's installed X.Y versions (its shims answer only for the
# versions pyenv has selected, so its interpreters are looked up by path).
python_candidates() {
    local version root
    root="$(pyenv root 2>/dev/null || true)"
    for version in "${PREFERRED[@]}"; do
        echo "python$version"
        if [[ -n "$root" ]]; then
            ls -d "$root"/versions/"$version".*/bin/"python$version" 2>/dev/null | sort -V -r || true
        fi
    done
    echo python3
}

find_python() {
    local candidates
    if [[ -n "${PYTHON:-}" ]]; then candidates=("$PYTHON"); else mapfile -t candidates < <(python_candidates); fi
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
    { echo "$STACK"; cat setup.py scripts/setup.sh det_estimator/_version.py det_estimator/reducers/*.c; } | sha256sum | cut -d' ' -f1
}

horovod_is_ready() {
    local report
    report="$("$VENV/bin/horovodrun" --check-build 2>/dev/null)" || return 1
    grep -q '\[X\] TensorFlow' <<<"$report" && grep -q '\[X\] Gloo' <<<"$report"
}

# What the stack needs beyond det-estimator itself: Horovod on the estimator stack; nothing on
# the current one, where TensorFlow distributes by itself.
stack_is_ready() {
    [[ "$STACK" == current ]] || horovod_is_ready
}

# The Python PYTHON names wins over the venv's: a venv of another version is rebuilt.
if [[ -n "${PYTHON:-}" ]]; then
    python_is_supported "$PYTHON" || die "PYTHON=$PYTHON is not $SUPPORTED ($WHY)."
    wanted="$(python_version "$PYTHON")"
    if [[ -x "$VENV/bin/python" ]] && [[ "$(python_version "$VENV/bin/python")" != "$wanted" ]]; then
        step "$VENV has Python $(python_version "$VENV/bin/python"), PYTHON=$PYTHON is $wanted: recreating it"
        rm -rf "$VENV"
    fi
fi

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(setup_fingerprint)" ]] && stack_is_ready; then
    step "environment in $VENV is up to date"
    exit 0
fi

if [[ -x "$VENV/bin/python" ]] && ! python_is_supported "$VENV/bin/python"; then
    step "$VENV has an unsupported Python; recreating it"
    rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    PYTHON_BIN="$(find_python)" || die "det-estimator's $STACK stack needs $SUPPORTED ($WHY). \
None was found${PYTHON:+ (PYTHON=$PYTHON is not one of them)}; install one or set PYTHON."
    step "creating $VENV with $("$PYTHON_BIN" --version 2>&1)"
    "$PYTHON_BIN" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

if [[ "$STACK" == current ]]; then
    step "installing TensorFlow $CURRENT_TENSORFLOW_VERSION (CPU), tf-keras $CURRENT_TENSORFLOW_VERSION and det-estimator[dev]"
    # tf-keras requires the `tensorflow` distribution, which pip installs beside tensorflow-cpu
    # at the same version.
    "${PIP[@]}" install --quiet wheel setuptools packaging "tensorflow-cpu==$CURRENT_TENSORFLOW_VERSION" \
        "tf-keras==$CURRENT_TENSORFLOW_VERSION" -e ".[dev]"
else
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
fi

if ! "$VENV/bin/python" -c 'import det_estimator.reducers._ranking_kernels' 2>/dev/null; then
    step "warning: the native ranking kernels did not build (is a C compiler installed?); \
RocAuc and AveragePrecision use NumPy instead, several times slower"
fi
if ! "$VENV/bin/python" -c 'import sqlalchemy, psycopg' 2>/dev/null; then
    die "the store's SQL layer (sqlalchemy) or its PostgreSQL driver (psycopg) does not import in $VENV"
fi
if ! stack_is_ready; then
    "$VENV/bin/horovodrun" --check-build >&2 || true
    die "horovodrun --check-build does not list both TensorFlow and Gloo"
fi
setup_fingerprint >"$STAMP"
tensorflow_version="$("$VENV/bin/python" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)"
if [[ "$STACK" == current ]]; then
    step "ready: $("$VENV/bin/python" --version 2>&1), TensorFlow $tensorflow_version, Keras $("$VENV/bin/python" -c \
        'import keras; print(keras.__version__)' 2>/dev/null) (tf-keras under TF_USE_LEGACY_KERAS=1), no Horovod"
else
    step "ready: $("$VENV/bin/python" --version 2>&1), TensorFlow $tensorflow_version, Horovod $HOROVOD_VERSION (TensorFlow, Gloo)"
fi
