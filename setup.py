"""Build the Cython fast path, the compiled emulator modules and the flow engine; everything
else is in pyproject.toml.

How the build spends its time (bench/RESULTS.md, "Install time"; docs/architecture.md,
"Compiled modules"):

- Cython writes the C of a module only when what it reads changed (``_buildcache``: by
  content, never by file times), in ``build/cython``, on every core.
- The C compiler runs on every core, the longest compiles first (``_fastpath``, the flow
  engines), as soon as a module's C is written.  Everything at ``-O1``: -O2 ran the
  emulator 2-3 % faster and took 1.7 times as long to compile; ``_fastpath`` decodes as fast
  at -O1 as at -O3 in half the compile time (its ICRC calls lost ~10 %, 20 ns per 4 KiB
  frame); the flow engines' analysis lost 10 % (4 ms on 200,000 packets) for 45 % less
  compile time.  Below -O1 the emulator lost 10 % (-Og) to 45 % (-O0); two of -O1's
  passes (``LEAN``) are left out, 14 % of the compile time for nothing measurable.  No
  debug information (``-g0``): a third of the compile time, nothing at run time.
- Cython's utility code (reference counting, calls, exceptions, its function and generator
  types) is one shared module, ``roce._cyutility``, instead of a copy compiled into every
  module: 12 % less C to compile across the emulator's modules.  The emulator's extension
  types are final unless Python subclasses them (``_compiled.OPEN``), and none is
  picklable (``auto_pickle`` off: nothing pickles them): less C again.
- Each linked module is kept in ``build/ext-cache`` under the SHA-256 of what it is made of;
  a later build of the same sources (``pip install -e .`` after ``pip install .``) copies it
  instead of compiling.  ``ROCE_BUILD_CACHE=0`` turns the cache off.
- One line per module as it is done (``pip install -v .`` shows them).
"""

import os
import re
import runpy
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import nullcontext

import Cython
from Cython.Build import cythonize
from Cython.Build.Dependencies import create_dependency_tree
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# the shared utility module (``SHARED``) came with Cython 3.1 (pyproject.toml asks for it; a
# build without isolation may bring an older one)
if tuple(map(int, re.match(r"(\d+)\.(\d+)", Cython.__version__).groups())) < (3, 1):
    sys.exit(f"roce's build needs Cython >= 3.1, found {Cython.__version__}: "
             "pip install -U 'Cython>=3.1'")

ROOT = os.path.dirname(os.path.abspath(__file__))
CYTHON_DIR = os.path.join("build", "cython")  # generated C (relative: the build runs in ROOT)
# Cython's utility code, shared by every module instead of compiled into each one
SHARED = "roce._cyutility"
SHARED_C = os.path.join(CYTHON_DIR, "roce", "_cyutility.c")
# what GCC >= 14 refuses by default fails the build with any GCC (and clang)
STRICT = ["-Werror=incompatible-pointer-types"]
# -g0 everywhere: debug information was a third of the compile time and most of the wheel's
# size, and nothing at run time.  -O1 everywhere: what each level costs and gives is in the
# docstring above.
# Two passes of -O1 that are a seventh of its time on Cython's C and buy nothing measurable
# there (points-to analysis; jump threading and redundancy elimination over dominators):
# bench/emu_speed_ab.py 0.98-1.01, bench/bench_stats_ab.py 0.99-1.02 without them
LEAN = ["-fno-tree-pta", "-fno-tree-dominator-opts"]
FASTPATH_FLAGS = ["-O1", *LEAN, "-g0", *STRICT]
EMULATOR_FLAGS = ["-O1", *LEAN, "-g0", *STRICT]
# Annotations stay hints (annotation_typing off): the compiled form must behave exactly as
# the interpreted one.
EMULATOR_DIRECTIVES = {"annotation_typing": False, "binding": True, "auto_pickle": False}
# The flow engine (roce/analysis/flowref.py compiled, unchanged, as roce.analysis._flowengine,
# beside the .py that stays the interpreted reference: _compiled.TWINS).  Its C types are in
# roce/analysis/_flowengine.pxd, so here annotations stay hints too; Python's division, and no
# bounds checks (the source indexes only what it checked).
TWIN_FLAGS = ["-O1", *LEAN, "-g0", *STRICT]
TWIN_DIRECTIVES = {"annotation_typing": False, "boundscheck": False, "wraparound": False,
                   "initializedcheck": False, "cdivision": False}


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


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def compiler_version(command: list[str]) -> str:
    try:
        r = subprocess.run([command[0], "--version"], capture_output=True, text=True)
    except (OSError, IndexError):
        return ""
    return r.stdout


class BuildExt(build_ext):
    """Cython and the C compiler on every core, a cache of built modules, a line per module.
    ``-j N`` sets the number of jobs (default: every core)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = cores()
        # what a module is made of decides what is rebuilt (_buildcache), not file times
        self.force = True

    def run(self) -> None:
        super().run()
        if self.inplace:  # a module no longer compiled must not be found beside its .py
            for path in compiled["leftover_builds"](ROOT):
                os.remove(path)
                self._say(f"removed {os.path.relpath(path, ROOT)}: no longer compiled")

    def build_extensions(self) -> None:
        self.check_extensions_list(self.extensions)
        jobs = max(1, int(self.parallel))
        start = time.monotonic()
        # nothing before the first Cython job but what decides it: the OpenMP probe runs
        # beside it, wanted only when _fastpath's C is compiled
        side = ThreadPoolExecutor(1)
        self._omp = side.submit(openmp_flags)
        side.shutdown(wait=False)
        where = cache_lib["cache_dir"](os.path.join(ROOT, "build", "ext-cache"))
        self._cache = cache_lib["Cache"](where) if where else None
        self._cc_version = compiler_version(getattr(self.compiler, "compiler_so", None) or [])
        # the longest compiles first: _fastpath, the shared utility code, then the largest
        order = sorted(self.extensions, key=lambda e: (e.name != "roce._fastpath",
                                                       e.name != SHARED,
                                                       -_size(e.sources[0])))
        todo = self._stale_c(order)
        from Cython.Build.SharedModule import generate_shared_module  # Cython >= 3.1
        self._say(f"building {len(order)} extension modules, {jobs} at a time; C to write "
                  f"with Cython: {len(todo)} (new or changed sources)")
        made = {"compiled": 0, "cached": 0}
        with ProcessPoolExecutor(jobs) if todo else nullcontext() as cython_pool:
            # Cython's own function in the workers: a function of this file cannot be sent
            # to them (pip's backend runs this file's code without a module to import it from)
            c_files = {name: (cython_pool.submit(
                cythonize, [Extension(name, sources=[source])], language_level=3,
                quiet=True, force=True, build_dir=CYTHON_DIR, compiler_directives=directives,
                shared_utility_qualified_name=SHARED) if name != SHARED else
                cython_pool.submit(generate_shared_module, _shared_options()),
                c_file, fp) for name, (source, directives, c_file, fp) in todo.items()}
            with ThreadPoolExecutor(jobs) as pool:
                futures = {pool.submit(self._build_one, ext, c_files.get(ext.name)): ext
                           for ext in order}
                try:
                    for n, done in enumerate(as_completed(futures), 1):
                        how, seconds = done.result()
                        made[how] += 1
                        what = f"compiled in {seconds:.1f} s" if how == "compiled" else \
                            "taken from the build cache"
                        self._say(f"[{n:>2}/{len(order)}] {futures[done].name} {what} "
                                  f"({time.monotonic() - start:.0f} s)")
                except BaseException:  # the first error ends the build: nothing more starts
                    for p in (pool, cython_pool):
                        if p is not None:
                            p.shutdown(wait=False, cancel_futures=True)
                    raise
        self._say(f"done in {time.monotonic() - start:.0f} s: {made['compiled']} compiled, "
                  f"{made['cached']} from the cache")

    def _stale_c(self, order: list[Extension]) -> dict:
        """The Cython sources whose C must be written, in ``order``: module name -> (source,
        directives, C file, fingerprint).  Every extension's first source becomes its C
        file."""
        tree = create_dependency_tree()
        todo = {}
        for ext in order:
            src = ext.sources[0]
            base, kind = os.path.splitext(src)
            if ext.name == SHARED:  # Cython's utility code: new with each Cython version
                fp = cache_lib["cython_fingerprint"](Cython.__version__, {"shared": SHARED}, [])
                if _read_fingerprint(SHARED_C) != [fp, _sha256_or_none(SHARED_C)]:
                    os.makedirs(os.path.dirname(SHARED_C), exist_ok=True)
                    todo[SHARED] = (None, None, SHARED_C, fp)
                continue
            if kind not in (".py", ".pyx"):
                continue
            twin = ext.name in compiled["TWINS"]
            directives = {} if kind == ".pyx" else TWIN_DIRECTIVES if twin else \
                EMULATOR_DIRECTIVES
            c_file = os.path.join(CYTHON_DIR, base + ".c")
            # what Cython reads in this tree (its own Includes: its version says them); a
            # twin's .pxd is named after the module it builds, not its source: Cython's
            # dependency tree does not list it, nor what it cimports
            extra = [*compiled["twin_sources"](ext.name), os.path.join("roce", "_fastpath.pxd")] \
                if twin else []
            deps = set(tree.all_dependencies(src)) | set(extra)
            files = [src] + sorted(os.path.normpath(p) for p in deps - {src}
                                   if not os.path.relpath(p).startswith(os.pardir))
            fp = cache_lib["cython_fingerprint"](
                Cython.__version__, {"language_level": 3, "shared": SHARED, **directives}, files)
            if _read_fingerprint(c_file) != [fp, _sha256_or_none(c_file)]:
                todo[ext.name] = (src, directives, c_file, fp)
            ext.sources = [c_file, *ext.sources[1:]]
        return todo

    def _build_one(self, ext: Extension, cython: tuple | None) -> tuple[str, float]:
        if cython is not None:
            job, c_file, fingerprint = cython
            job.result()  # Cython's C for it is written (or its error raised here)
            _write_fingerprint(c_file, fingerprint)
        if ext.name == "roce._fastpath":  # its batch ICRC uses every core where it can
            omp = self._omp.result()
            ext.extra_compile_args += omp
            ext.extra_link_args += omp
        t = time.monotonic()
        dest = self.get_ext_fullpath(ext.name)
        key = self._key(ext)
        if self._cache is not None and self._cache.fetch(ext.name, key, dest):
            return "cached", time.monotonic() - t
        self.build_extension(ext)
        if self._cache is not None:
            self._cache.store(ext.name, key, dest)
        return "compiled", time.monotonic() - t

    def _key(self, ext: Extension) -> str:
        c = self.compiler
        commands = {
            "compile": getattr(c, "compiler_so", None) or type(c).__name__,
            "link": getattr(c, "linker_so", None) or "",
            "extra_compile_args": ext.extra_compile_args, "extra_link_args": ext.extra_link_args,
            "define_macros": ext.define_macros, "undef_macros": ext.undef_macros,
            "libraries": self.get_libraries(ext), "library_dirs": ext.library_dirs,
            "runtime_library_dirs": ext.runtime_library_dirs,
            "extra_objects": ext.extra_objects, "language": ext.language,
        }
        return cache_lib["extension_key"](ext.name, ext.sources, ext.include_dirs, commands,
                                          self._cc_version)

    @staticmethod
    def _say(text: str) -> None:
        print(f"roce build: {text}", flush=True)


def _shared_options() -> object:
    """Cython's options for writing ``roce._cyutility``'s C: Cython's utility code, which
    the modules it writes import instead of each carrying a copy."""
    from Cython.Compiler.Main import CompilationOptions

    return CompilationOptions(shared_c_file_path=SHARED_C, shared_utility_qualified_name=None,
                              language_level=3)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _sha256_or_none(path: str) -> object:
    try:
        return cache_lib["file_sha256"](path)
    except OSError:
        return None


def _read_fingerprint(c_file: str) -> object:
    try:
        with open(c_file + ".inputs") as f:
            return f.read().split()
    except OSError:
        return None


def _write_fingerprint(c_file: str, fingerprint: str) -> None:
    with open(c_file + ".inputs", "w") as f:
        f.write(f"{fingerprint} {cache_lib['file_sha256'](c_file)}\n")


def extensions() -> list[Extension]:
    fast = Extension("roce._fastpath", sources=["roce/_fastpath.pyx", "roce/_crc32.c"],
                     include_dirs=["roce"], extra_compile_args=list(FASTPATH_FLAGS))
    # The emulator's per-packet modules, compiled from their .py source unchanged
    # (roce/_compiled.py lists them; ROCE_PURE=1 runs the .py form).  The classes of its
    # CLASSES become extension types through generated .pxd files.
    emulator = [Extension(name, sources=[name.replace(".", "/") + ".py"],
                          extra_compile_args=list(EMULATOR_FLAGS))
                for name in compiled["MODULES"]]
    twins = [Extension(name, sources=[src.replace(".", "/") + ".py"],
                       extra_compile_args=list(TWIN_FLAGS))
             for name, src in compiled["TWINS"].items()]
    shared = Extension(SHARED, sources=[SHARED_C], extra_compile_args=list(EMULATOR_FLAGS))
    return [fast, shared, *emulator, *twins]


compiled = runpy.run_path(os.path.join(ROOT, "roce", "_compiled.py"))
cache_lib = runpy.run_path(os.path.join(ROOT, "roce", "_buildcache.py"))
if __name__ == "__main__":  # not when a worker process (spawned) imports this file
    compiled["write_sources"](ROOT)
    compiled["write_pxds"](ROOT)  # the extension types' declarations, from the .py (CLASSES)
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
