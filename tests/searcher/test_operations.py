import json

import pytest

from det_estimator.searcher import (
    Close,
    Create,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    operation_from_dict,
)

OPERATIONS = [
    Create(3, {"lr": 0.1, "layers": [64, 32], "optimizer": {"name": "adam"}}, 12345),
    ValidateAfter(3, 400),
    Close(3),
    Shutdown(),
    Shutdown(failure=True),
]


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: type(op).__name__)
def test_operations_round_trip_through_json(op):
    as_dict = json.loads(json.dumps(op.to_dict(), allow_nan=False))
    assert operation_from_dict(as_dict) == op


def test_dict_forms():
    assert ValidateAfter(1, 25).to_dict() == {"type": "validate_after", "request_id": 1, "length": 25}
    assert Close(2).to_dict() == {"type": "close", "request_id": 2}
    assert Shutdown().to_dict() == {"type": "shutdown", "failure": False, "reason": ""}
    assert Create(0, {"a": 1}, 9).to_dict() == {"type": "create", "request_id": 0, "hparams": {"a": 1}, "trial_seed": 9}


def test_create_dict_does_not_share_hparams():
    hparams = {"layers": [64]}
    as_dict = Create(0, hparams, 1).to_dict()
    as_dict["hparams"]["layers"].append(32)
    assert hparams == {"layers": [64]}
    rebuilt = operation_from_dict(Create(0, hparams, 1).to_dict())
    rebuilt.hparams["layers"].append(16)
    assert hparams == {"layers": [64]}


def test_operations_are_frozen_and_hashable():
    with pytest.raises(AttributeError):
        ValidateAfter(1, 25).length = 50
    assert len({Create(0, {"a": 1}, 9), Create(0, {"a": 1}, 9), Close(0)}) == 2


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"type": "train", "request_id": 1},
            r"must have a type among \['close', 'create', 'shutdown', 'validate_after'\]",
        ),
        ({"request_id": 1}, "must have a type among"),
        ({"type": "close"}, "'close' operation dict must have exactly the keys type, request_id"),
        ({"type": "validate_after", "request_id": 1, "length": 2, "extra": 0}, "exactly the keys"),
    ],
)
def test_bad_dicts_are_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        operation_from_dict(bad)


def test_exited_reasons():
    assert {reason.name for reason in ExitedReason} == {"ERRORED", "USER_CANCELED", "INVALID_HP"}
    assert ExitedReason("invalid_hp") is ExitedReason.INVALID_HP
