"""The numpy references against the implementations they follow: Lamb and gradient clipping
against PaddlePaddle's own (tools/check_reference_against_paddle.py), in a venv of their own
(PaddlePaddle is not a dependency of ms_optim).  The anchors tier: run by --all and CI."""
import os
import subprocess
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PADDLE = "paddlepaddle==3.3.1"


@pytest.mark.anchors
def test_lamb_and_clipping_references_follow_paddle(tmp_path):
    env_dir = tmp_path / "paddle"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", PADDLE, "numpy"], check=True,
                   timeout=900, capture_output=True)
    res = subprocess.run([python, "-m", "tools.check_reference_against_paddle"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert any(line.startswith("paddle 3.3.1: worst") and line.endswith("(OK)")
               for line in lines), res.stdout
    assert sum("max |paddle - reference|" in line for line in lines) == 6, res.stdout
