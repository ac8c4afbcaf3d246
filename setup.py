"""Build the Cython fast path; everything else is in pyproject.toml."""

import os
import subprocess
import sys
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup


def openmp_flags() -> list[str]:
    """-fopenmp when the C compiler takes it (batch ICRC uses every core); else none: the
    parallel loops then run on one core."""
    if os.environ.get("ROCE_NO_OPENMP") or sys.platform == "win32":
        return []
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "t.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
        try:
            r = subprocess.run([cc, "-fopenmp", src, "-o", os.path.join(d, "t")],
                               capture_output=True)
        except OSError:
            return []
    return ["-fopenmp"] if r.returncode == 0 else []


omp = openmp_flags()
extensions = [
    Extension(
        "roce._fastpath",
        sources=["roce/_fastpath.pyx", "roce/_crc32.c"],
        include_dirs=["roce"],
        extra_compile_args=["-O3", *omp],
        extra_link_args=omp,
    )
]

setup(ext_modules=cythonize(extensions, language_level=3, quiet=True))
