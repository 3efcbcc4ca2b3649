"""Only the C part of memfs; everything else is declared in pyproject.toml.

`memfs/_fastopen.c` answers warm read-only opens without entering Python (see that file and
docs/ARCHITECTURE.md, "Fast opens"). It is optional: where it cannot be built (no compiler or no
libfuse3 headers) the install goes on without it and every open goes through Python.
"""

import subprocess

from setuptools import Extension, setup


def pkg_config(flag: str) -> list[str]:
    try:
        out = subprocess.run(["pkg-config", flag, "fuse3"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ["-I/usr/include/fuse3"] if flag == "--cflags" else ["-lfuse3"]
    return out.split()


setup(ext_modules=[Extension(
    "memfs._fastopen",
    sources=["memfs/_fastopen.c"],
    extra_compile_args=pkg_config("--cflags"),
    extra_link_args=["-Wl,--version-script=memfs/_fastopen.map", *pkg_config("--libs"), "-ldl"],
    depends=["memfs/_fastopen.map"],
    optional=True,
)])
