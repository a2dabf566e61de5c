"""The click-through-rate example runs in test mode, and its scoring script reads the result."""

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ctr_binary"


def run(*args, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_train_in_test_mode_then_score_with_its_saved_model(tmp_path):
    trained = run(str(EXAMPLE / "train.py"), "--test", "--trial-id", "smoke", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "trial smoke: COMPLETED after 1 batches" in trained.stdout
    auc = float(re.search(r"ROC AUC ([0-9.]+)", trained.stdout).group(1))
    assert 0.0 <= auc <= 1.0
    checkpoint = re.search(r"^checkpoint after 1 batches: (.+)$", trained.stdout, re.MULTILINE).group(1)
    assert (tmp_path / checkpoint / "raw" / "saved_model.pb").exists()

    scored = run(str(EXAMPLE / "score.py"), checkpoint, "--rows", "1000", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "scored 1000 rows" in scored.stdout
