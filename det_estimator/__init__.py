"""det-estimator: train, evaluate and serve tf.estimator models on one to many Horovod workers.

Typical use::

    import det_estimator as det
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
