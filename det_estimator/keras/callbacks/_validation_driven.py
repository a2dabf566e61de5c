"""ValidationDriven: what turns a Keras callback that acts on epochs into one that acts on every validation."""

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # the Keras callback class this one is mixed in before
    from tensorflow.keras.callbacks import Callback as _KerasCallback
else:
    _KerasCallback = object


class ValidationDriven(_KerasCallback):
    """Mixed in before a Keras callback class: its epoch logic runs on every validation instead.

    ``on_epoch_end`` does nothing; ``on_test_end`` calls the Keras class's
    ``on_epoch_end`` with the index of the validation as the epoch, and logs holding
    each validation metric under its own name and with a ``val_`` prefix (Keras'
    callbacks usually monitor ``val_loss``, and ``on_test_end`` receives ``loss``).
    ``validations`` counts them, and is part of the callback's state.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.validations = 0

    def on_train_begin(self, logs: Optional[dict[str, Any]] = None) -> None:
        super().on_train_begin(logs)
        self.validations = 0

    def on_epoch_end(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
        """Does nothing: this callback acts on validations (``on_test_end``)."""

    def on_test_end(self, logs: Optional[dict[str, Any]] = None) -> None:
        """Runs the Keras callback's epoch logic on this validation's metrics (combined over all processes)."""
        epoch = self.validations
        self.validations += 1
        logs = dict(logs or {})  # a new dict: Keras' logic may add to it (ReduceLROnPlateau adds "lr")
        logs.update({f"val_{name}": value for name, value in list(logs.items()) if not name.startswith("val_")})
        super().on_epoch_end(epoch, logs)
