"""Launchers for scripts on the Core API: ``python3 -m det_estimator.launch.<engine> -- python3 train.py``.

- ``det_estimator.launch.tensorflow`` starts the script once per slot with the
  ``TF_CONFIG`` of a ``tf.distribute.MultiWorkerMirroredStrategy`` job (read it with
  ``det.core.DistributedContext.from_tf_config()``);
- ``det_estimator.launch.horovod`` starts it under ``horovodrun --gloo``.

Both take ``--slots N`` and ``--hosts h1:n,h2:m``; launched by an experiment, the slots
and machines come from the trial's cluster info. On one slot they run the command
itself. Neither imports TensorFlow.
"""
