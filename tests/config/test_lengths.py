import pytest

from det_estimator.config import Length, LengthUnit


@pytest.mark.parametrize(
    ("length", "global_batch_size", "records_per_epoch", "batches"),
    [
        (Length(LengthUnit.BATCHES, 7), 32, 0, 7),
        (Length(LengthUnit.RECORDS, 1000), 32, 0, 31),
        (Length(LengthUnit.RECORDS, 10), 32, 0, 1),  # floored at one batch
        (Length(LengthUnit.EPOCHS, 3), 32, 1000, 93),
        (Length(LengthUnit.EPOCHS, 1), 32, 10, 1),  # floored at one batch
    ],
)
def test_to_batches(length, global_batch_size, records_per_epoch, batches):
    assert length.to_batches(global_batch_size, records_per_epoch) == batches


def test_epochs_need_records_per_epoch():
    with pytest.raises(ValueError, match="records_per_epoch"):
        Length(LengthUnit.EPOCHS, 1).to_batches(32, 0)


def test_to_dict():
    assert Length(LengthUnit.RECORDS, 500).to_dict() == {"records": 500}
