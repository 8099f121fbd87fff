"""pip install . / pip wheel .: the `qvg` package (python/qvg) with its extension qvg._qvg built through CMake.

Offline, from what Debian 12 ships (setuptools, wheel, pybind11-dev, python3-numpy,
libdlpack-dev): `pip install --no-build-isolation .`. The extension is built for the
interpreter that runs pip; in a virtual environment whose pybind11 is a Python package
(PyTorch's on the GPU machine), that one's CMake files are used. Extra CMake options:
the environment variable QVG_CMAKE_ARGS (e.g. "-DQVG_WITH_CUDA=OFF").
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    """The version in CMakeLists.txt's project(): the one place it is set."""
    m = re.search(r"project\(qvg VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    if not m:
        raise RuntimeError("no project(qvg VERSION ...) in CMakeLists.txt")
    return m.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = ROOT / "build-pip" / f"py{sys.version_info[0]}{sys.version_info[1]}"
        args = [
            "cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}", "-DQVG_BUILD_TESTS=OFF", "-DQVG_BUILD_BENCH=OFF",
            "-DQVG_BUILD_TOOLS=OFF", "-DQVG_BUILD_PYTHON=ON",
        ]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        try:  # pybind11 as a Python package (a virtual environment's), else the system's CMake files
            import pybind11
            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        args += shlex.split(os.environ.get("QVG_CMAKE_ARGS", ""))
        subprocess.run(args, check=True)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "qvg_python", "-j", jobs], check=True)
        built = next((build / "python" / "qvg").glob("_qvg*.so"), None)
        if built is None:
            raise RuntimeError(f"the qvg module was not built (see {build}); is pybind11 / DLPack's header there?")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(
    version=project_version(),
    packages=["qvg"],
    package_dir={"qvg": "python/qvg"},
    ext_modules=[Extension("qvg._qvg", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
