"""Build the Cython fast path; everything else is in pyproject.toml."""

import os
import runpy
import subprocess
import sys
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


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

# The emulator's per-packet modules, compiled from their .py source unchanged (roce/_compiled.py
# lists them; ROCE_PURE=1 runs the .py form).  Annotations stay hints (annotation_typing off):
# the compiled form must behave exactly as the interpreted one.  The classes of its CLASSES
# become extension types through generated .pxd files.
compiled = runpy.run_path(os.path.join("roce", "_compiled.py"))
modules = compiled["MODULES"]
root = os.path.dirname(os.path.abspath(__file__))
compiled["write_sources"](root)
compiled["write_pxds"](root)  # the extension types' declarations, from the .py (CLASSES)
emulator = [Extension(name, sources=[name.replace(".", "/") + ".py"],
                      extra_compile_args=["-O2"]) for name in modules]
# The flow engine: roce/analysis/flowref.py compiled, unchanged, as roce.analysis._flowengine,
# beside the .py that stays the interpreted reference (_compiled.TWINS).  Its C types are in
# roce/analysis/_flowengine.pxd, so here annotations stay hints too; Python's division, and no
# bounds checks (the source indexes only what it checked).
twins = [Extension(name, sources=[src.replace(".", "/") + ".py"], extra_compile_args=["-O3"])
         for name, src in compiled["TWINS"].items()]
build_dir = os.path.join("build", "cython")


def declarations_changed() -> bool:
    """Cython tracks a .py and the .pxd of the same name, not the .pxd named after the module
    it builds (nor the fast path's it cimports): a newer one forces the twins' C anew."""
    for name, src in compiled["TWINS"].items():
        c_file = os.path.join(build_dir, src.replace(".", "/") + ".c")
        deps = [*compiled["twin_sources"](name), os.path.join("roce", "_fastpath.pxd")]
        if os.path.exists(c_file) and any(os.path.getmtime(d) > os.path.getmtime(c_file)
                                           for d in deps):
            return True
    return False


jobs = os.cpu_count() or 1


class ParallelBuildExt(build_ext):
    """Compiles the C files on every core (the emulator modules are many)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = jobs


setup(ext_modules=cythonize(extensions, language_level=3, quiet=True)
      + cythonize(emulator, language_level=3, quiet=True, nthreads=jobs,
                  build_dir=os.path.join("build", "cython"),
                  compiler_directives={"annotation_typing": False, "binding": True})
      + cythonize(twins, language_level=3, quiet=True, build_dir=build_dir,
                  force=declarations_changed(),
                  compiler_directives={"annotation_typing": False, "boundscheck": False,
                                       "wraparound": False, "initializedcheck": False,
                                       "cdivision": False}),
      cmdclass={"build_ext": ParallelBuildExt})
