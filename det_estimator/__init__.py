"""det-estimator: train, evaluate and serve tf.estimator models on one to many Horovod workers.

Typical use::

    import det_estimator as det
"""

from det_estimator.reducers import MetricReducer

__version__ = "0.1.0"

__all__ = ["MetricReducer", "__version__"]
