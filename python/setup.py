"""Build of the mooncake package for pip (see pyproject.toml).

The extension mooncake._mooncake is C (python/csrc) against the CPython API.
It links libmooncake statically: the library's objects are built -fPIC by
the project's Makefile (make -C .. build/libmooncake.a), so the installed
module needs no libmooncake.so at run time, only the system libraries the
library itself uses (libevent, hiredis, libnuma, libibverbs). The daemons
the launchers start (mooncake-master, mooncake-http-metadata-server,
mooncake-store-server) are built the same way and installed
inside the package (mooncake/bin).
"""
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, "build")


def _programs():
    """The daemons the launchers start, as far as this tree builds them."""
    with open(os.path.join(ROOT, "mk", "programs.mk")) as f:
        built = set(re.findall(r"call program,([\w-]+),", f.read()))
    return [p for p in ("mooncake-master", "mooncake-http-metadata-server",
                        "mooncake-store-server") if p in built]


PROGRAMS = _programs()


def make(*targets):
    jobs = os.environ.get("MAKEFLAGS_JOBS", "-j2")
    subprocess.check_call(["make", "-C", ROOT, jobs] + list(targets))


def makefile_var(name):
    out = subprocess.check_output(["make", "-s", "-C", ROOT, "print-" + name], text=True)
    return out.strip()


def version():
    with open(os.path.join(ROOT, "Makefile")) as f:
        m = re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M)
    return m.group(1)


class BuildExt(build_ext):
    def run(self):
        make("build/libmooncake.a", *("build/" + p for p in PROGRAMS))
        libs = makefile_var("LDLIBS_LIB").split()
        for ext in self.extensions:
            ext.extra_objects = [os.path.join(BUILD, "libmooncake.a")]
            ext.extra_link_args = ["-Wl,--exclude-libs,ALL"] + libs
        super().run()


class BuildPy(build_py):
    def run(self):
        super().run()
        make(*("build/" + p for p in PROGRAMS))
        bindir = os.path.join(self.build_lib, "mooncake", "bin")
        os.makedirs(bindir, exist_ok=True)
        for p in PROGRAMS:
            shutil.copy2(os.path.join(BUILD, p), os.path.join(bindir, p))


ext = Extension(
    "mooncake._mooncake",
    sources=sorted(os.path.join("csrc", f) for f in os.listdir(os.path.join(HERE, "csrc"))
                   if f.endswith(".c")),
    include_dirs=[os.path.join(ROOT, "include"), os.path.join(HERE, "csrc")],
    define_macros=[("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11", "-fvisibility=hidden", "-pthread"],
)

setup(
    version=version(),
    packages=["mooncake"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
