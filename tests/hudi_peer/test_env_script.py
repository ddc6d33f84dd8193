"""scripts/hudi-peer-env.sh: the manifest it writes names absolute paths that exist, whether
``HUDI_PEER_VENV`` and ``HUDI_PEER_JARS_DIR`` are absolute or relative, from any working folder
(an absolute one had been joined to the project's folder, so every later peer start failed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .peer import ENV_SCRIPT, ROOT


@pytest.mark.skipif(shutil.which("java") is None, reason="the script looks for a Java runtime")
def test_the_manifest_names_absolute_paths_that_exist(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 0\n")  # a built environment: pip has nothing to do
    python.chmod(0o755)
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "hudi-spark3.5-bundle_2.12-0.15.0.jar").write_bytes(b"jar")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {**os.environ, "HUDI_PEER_VENV": str(venv), "HUDI_PEER_JARS_DIR": str(jars)}
    done = subprocess.run(
        ["bash", str(ENV_SCRIPT)], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((venv / "hudi-peer.json").read_text())
    assert manifest["python"] == str(python)
    assert manifest["jars"][0] == str(jars / "hudi-spark3.5-bundle_2.12-0.15.0.jar")
    # then Hudi's DynamoDB lock provider and what it needs, fetched beside it
    assert any(Path(p).name == "hudi-aws-0.15.0.jar" for p in manifest["jars"])
    assert all(Path(p).parent == jars / "aws-lock" for p in manifest["jars"][1:])
    assert all(Path(p).is_file() for p in [manifest["python"], *manifest["jars"]])

    # relative: to the project's folder, made absolute
    relative = os.path.relpath(venv, ROOT)
    (venv / "hudi-peer.json").unlink()
    env["HUDI_PEER_VENV"] = relative
    done = subprocess.run(
        ["bash", str(ENV_SCRIPT)], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    named = Path(json.loads((venv / "hudi-peer.json").read_text())["python"])
    assert named.is_absolute() and named.samefile(python)
