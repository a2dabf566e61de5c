"""The one Keras engine: what every Keras front end (TFKerasTrial, DeterminedCallback, context.fit) runs on.

One job per module: the inputs and who reads what (``_inputs``, ``_sharding``,
``_sequences``), a trial's callbacks and their states (``_callbacks``,
``_callback_states``), metrics over every process (``_metrics``), random states
(``_random_states``), the SavedModel (``_serving``) and every use of Keras' internals
(``_keras_compat``).
"""
