"""pyproject.toml: `pip install .` in a venv builds the extension against
this build's libporteiro and imports it."""

import os
import shutil
import subprocess
import sys

import pytest


@pytest.mark.skipif(os.environ.get("PORTEIRO_SANITIZED") == "1",
                    reason="a sanitizer build (see python/CMakeLists.txt)")
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


def test_extension_uses_the_public_api_only():
    """python/src includes libporteiro's public headers (include/) only,
    never src/: the binding is built on the API others get."""
    import re

    src = os.environ.get("PORTEIRO_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    public = set(os.listdir(os.path.join(src, "include")))
    for name in os.listdir(os.path.join(src, "python", "src")):
        text = open(os.path.join(src, "python", "src", name)).read()
        # A header included only where it exists (a public header of a
        # newer libporteiro, guarded by __has_include) is public too.
        public_here = public | set(re.findall(r"__has_include\(<(porteiro[a-z_]*\.h)>\)", text))
        for inc in re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', text, re.M):
            if "porteiro" in inc or inc.startswith(("src/", "../")) or "/" in inc:
                assert inc in public_here, "%s includes %s, not a public header" % (name, inc)
        assert '#include "' not in text, "%s includes a private header" % name
