"""Build the Cython fast path; everything else is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension(
        "roce._fastpath",
        sources=["roce/_fastpath.pyx", "roce/_crc32.c"],
        include_dirs=["roce"],
        extra_compile_args=["-O3"],
    )
]

setup(ext_modules=cythonize(extensions, language_level=3, quiet=True))
