"""pyproject.toml: `pip install .` in a venv builds the extension against
this build's libporteiro and imports it."""

import os
import shutil
import subprocess
import sys

import pytest


def test_pip_install_in_a_venv(tmp_path):
    lib_dir = os.environ.get("PORTEIRO_LIB_DIR")
    src = os.environ.get("PORTEIRO_SOURCE_DIR")
    if not lib_dir or not src:
        pytest.skip("run by ctest (PORTEIRO_LIB_DIR, PORTEIRO_SOURCE_DIR)")
    tree = tmp_path / "python"
    shutil.copytree(os.path.join(src, "python"), tree,
                    ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    # System site packages: setuptools and wheel from Debian (no network).
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = dict(os.environ, PORTEIRO_INCLUDE_DIR=os.path.join(src, "include"),
               PORTEIRO_LIB_DIR=lib_dir)
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation",
                          "--no-index", str(tree)], env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    code = ("import porteiro; l = porteiro.Limiter(); "
            "print(porteiro.__file__, [bool(l.check('k', 'fixed_window 2/366d')) for _ in range(3)])")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert str(venv) in out.stdout and "[True, True, False]" in out.stdout
