"""Packaging for det-estimator.

The package installs on two stacks, chosen by an extra (see the README's "Two stacks"):

* ``estimator``: TensorFlow 2.15 with tf.estimator and Keras 2, NumPy 1, on Python 3.9 to
  3.11, distributed by Horovod. ``cpu`` and ``gpu`` are the same stack with TensorFlow's
  CPU-only or CUDA build: name one of ``estimator``, ``cpu`` and ``gpu``, never two, as each
  brings its own TensorFlow distribution.
* ``current``: TensorFlow 2.16 to 2.21 (no tf.estimator) with Keras 3, or tf-keras under
  ``TF_USE_LEGACY_KERAS=1``, NumPy 2, on Python 3.10 to 3.13, distributed by TensorFlow's
  MultiWorkerMirroredStrategy.

Horovod is deliberately not a dependency here: it has to be compiled against the
TensorFlow that is already installed, so ``scripts/setup.sh`` builds it after
TensorFlow. See the README.
"""

import ast
from pathlib import Path

from setuptools import Extension, find_packages, setup

# TensorFlow 2.15 is the last release with tf.estimator; tensorflow-estimator 2.15 and
# Horovod 0.28.1 are built against NumPy 1.
TENSORFLOW_RANGE = ">=2.15,<2.16"
ESTIMATOR_STACK = ["tensorflow-estimator==2.15.0", "numpy<2"]
# TensorFlow 2.16 made Keras 3 its Keras; tf-keras is Keras 2 for TF_USE_LEGACY_KERAS=1, released
# with each TensorFlow and requiring that one.
CURRENT_TENSORFLOW_RANGE = ">=2.16,<2.22"


def read_version() -> str:
    """``__version__`` of det_estimator/_version.py, the version's one copy (read, not imported)."""
    path = Path(__file__).with_name("det_estimator") / "_version.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        names = [getattr(target, "id", None) for target in getattr(node, "targets", ())]
        if isinstance(node, ast.Assign) and names == ["__version__"]:
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{path} assigns no __version__")


setup(
    name="det-estimator",
    version=read_version(),
    description=(
        "Train, evaluate and serve tf.estimator models on one to many Horovod workers, "
        "with validation metrics that are exact across workers."
    ),
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["det_estimator", "det_estimator.*"]),
    # The web page's templates, script and style sheet.
    package_data={"det_estimator.ui": ["templates/*.html", "static/*.js", "static/*.css"]},
    # The exact ranking metrics' sort and passes (see det_estimator/reducers/_ranking.py).
    # Optional: without a C compiler the package installs, and NumPy does the same work, slower.
    ext_modules=[
        Extension(
            "det_estimator.reducers._ranking_kernels",
            ["det_estimator/reducers/_ranking_kernels.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ],
    python_requires=">=3.9,<3.14",
    # What both stacks share; TensorFlow and what ties NumPy to a major version come with the
    # stack's extra.
    install_requires=[
        "numpy",
        "scikit-learn",
        "pyyaml",
        # `det-estimator experiment plot` draws learning curves to PNG files.
        "matplotlib>=3.5",
        # The tpe searcher proposes hyperparameters with Optuna's Tree-structured Parzen Estimator.
        "optuna>=4.0",
        # The live progress bar: redrawn in place, with throughput and time left.
        "tqdm>=4.60",
        # The store writes TensorBoard event files with tensorboard's protos and record writer
        # (tensorboard.compat.proto, tensorboard.summary.writer), without TensorFlow, which is
        # an extra: the command alone must not depend on TensorFlow bringing tensorboard along.
        "tensorboard>=2.15",
        # `det-estimator ui`: a small ASGI app (Starlette, served by uvicorn), its pages rendered with Jinja2
        # (escaping everything by default), its charts drawn by the plotly.min.js that Plotly's package ships.
        # Imported only by det_estimator.ui, which only that command imports.
        "starlette>=0.37",
        "uvicorn>=0.29",
        "jinja2>=3.1",
        "plotly>=5.20",
        # The experiment store speaks SQL through one layer, SQLAlchemy Core 2, to either of its
        # databases: SQLite (Python's own driver) or PostgreSQL, through psycopg 3, the driver
        # SQLAlchemy 2 supports natively (the binary build brings its own libpq).
        "sqlalchemy>=2.0",
        "psycopg[binary]>=3.1",
    ],
    extras_require={
        "estimator": [f"tensorflow{TENSORFLOW_RANGE}", *ESTIMATOR_STACK],
        "cpu": [f"tensorflow-cpu{TENSORFLOW_RANGE}", *ESTIMATOR_STACK],
        "gpu": [f"tensorflow[and-cuda]{TENSORFLOW_RANGE}", *ESTIMATOR_STACK],
        "current": [f"tensorflow{CURRENT_TENSORFLOW_RANGE}", f"tf-keras{CURRENT_TENSORFLOW_RANGE}"],
        # mypy 1.19 and these PyYAML stubs are the last releases that support Python 3.9.
        "dev": [
            "pytest",
            "pytest-timeout",
            "pytest-xdist",
            "psutil",
            # The web page's tests: Starlette's test client needs httpx2; the browser tests drive Chromium.
            "httpx2",
            "selenium>=4.20",
            "ruff==0.17.6",
            "mypy==1.19.1",
            "types-PyYAML==6.0.12.20250915",
        ],
    },
    entry_points={"console_scripts": ["det-estimator=det_estimator.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
)
