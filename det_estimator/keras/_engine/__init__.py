"""The one Keras engine: what every Keras front end (TFKerasTrial, DeterminedCallback, context.fit) runs on.

One job per module:

- ``_loop``: the fit loop's driver, a callback inside ``model.fit``;
- ``_schedule``: when it reports, validates, checkpoints and asks whether to pause;
- ``_tap``: the train function as the engine drives it;
- ``_position``: the data position, and how each kind of input resumes there;
- ``_inputs``, ``_sharding``, ``_sequences``: the five loader kinds, who reads what, Sequence read-ahead;
- ``_callbacks``, ``_callback_states``: a trial's callbacks, and their states in checkpoints;
- ``_format``: the checkpoint format, and the reader of the older layouts;
- ``_metrics``, ``_random_states``, ``_serving``: metrics over every process, random states, the SavedModel;
- ``_keras_compat``: every use of Keras' internals.

Nothing is imported here, so that importing one module imports no other.
"""
