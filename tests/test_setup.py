"""The set-up of the two commands: ``make demo`` asks the OS for what the demo needs (a Java
runtime) and nothing that only the tests need (Maven, PostgreSQL, Chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "ensure-system-deps.sh"


def _machine(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has a Java runtime and nothing else of what the script looks
    for, as a user who is not root (``id -u`` answers 1000)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "ls"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    for name, body in (("java", "exit 0"), ("id", "echo 1000")):
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    return {**os.environ, "PATH": str(bin_dir)}


def _ensure(purpose: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), purpose], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_demo_needs_a_java_runtime_and_nothing_the_tests_need(tmp_path: Path) -> None:
    env = _machine(tmp_path)
    demo = _ensure("demo", env)
    assert (demo.returncode, demo.stdout, demo.stderr) == (0, "", "")
    tests = _ensure("test", env)
    assert tests.returncode == 1
    assert "maven" in tests.stderr and "chromium" in tests.stderr


def test_make_demo_asks_for_the_demos_packages_only() -> None:
    planned = subprocess.run(
        ["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert planned.returncode == 0, planned.stderr
    assert "ensure-system-deps.sh demo" in planned.stdout
    assert "ensure-system-deps.sh test" not in planned.stdout
    assert "hudi-peer-env.sh" not in planned.stdout


def test_an_editable_install_of_the_project_prints_no_warning(tmp_path: Path) -> None:
    """An editable install (make's, or a user's of an extra) is quiet: setuptools printed a
    10-line warning about flat layouts on each."""
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]  # make's pip
    done = subprocess.run(
        [*pip, "install", "-q", "--no-deps", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "warning" not in (done.stdout + done.stderr).lower(), done.stderr
