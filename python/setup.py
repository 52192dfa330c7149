"""The C extension porteiro._porteiro, linked with libporteiro.

Where libporteiro is found, first that answers:
  PORTEIRO_INCLUDE_DIR / PORTEIRO_LIB_DIR   (e.g. a build tree: ../include, ../build)
  pkg-config porteiro                       (libporteiro-dev, or PKG_CONFIG_PATH)
  this source tree's ../include and ../build (python/ inside porteiro's tree)
"""

import os
import shlex
import subprocess

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "porteiro"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out)


include_dirs, library_dirs, rpath = [], [], []
if os.environ.get("PORTEIRO_INCLUDE_DIR") or os.environ.get("PORTEIRO_LIB_DIR"):
    include_dirs = [os.environ.get("PORTEIRO_INCLUDE_DIR", os.path.join(here, "..", "include"))]
    library_dirs = [os.environ.get("PORTEIRO_LIB_DIR", os.path.join(here, "..", "build"))]
    rpath = list(library_dirs)
elif pkg_config("--exists") is not None:
    include_dirs = [f[2:] for f in pkg_config("--cflags-only-I") if f.startswith("-I")]
    library_dirs = [f[2:] for f in pkg_config("--libs-only-L") if f.startswith("-L")]
else:
    include_dirs = [os.path.join(here, "..", "include")]
    library_dirs = [os.path.join(here, "..", "build")]
    rpath = list(library_dirs)

setup(
    ext_modules=[
        Extension(
            "porteiro._porteiro",
            sources=["src/_porteiro.c"],
            include_dirs=include_dirs,
            library_dirs=library_dirs,
            runtime_library_dirs=[os.path.abspath(d) for d in rpath],
            libraries=["porteiro"],
            extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"],
        )
    ],
)
