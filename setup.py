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

ROOT = Path(__file__).resolve().parent
DEBIAN = "apt-get install python3-setuptools python3-wheel python3-numpy pybind11-dev libdlpack-dev"


def require_build_tools():
    """One line and exit 1 when this interpreter lacks what the build needs (setuptools, wheel where
    setuptools has no bdist_wheel of its own, NumPy for the module at run time), naming the interpreter."""
    missing = []
    try:
        import setuptools
    except ImportError:
        missing.append("setuptools")
        setuptools = None
    if setuptools is not None:
        version = tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
        if version < (70, 1):  # setuptools 70.1 and later build wheels without the wheel package
            try:
                import wheel  # noqa: F401
            except ImportError:
                missing.append("wheel")
    try:
        import numpy  # noqa: F401
    except ImportError:
        missing.append("numpy")
    if missing:
        sys.exit(f"qvg: {sys.executable} lacks {', '.join(missing)}: use Debian's /usr/bin/python3 with "
                 f"`{DEBIAN}`, or install them into this interpreter (python -m pip install "
                 f"{' '.join(missing)}); then pip install --no-build-isolation .")


require_build_tools()

from setuptools import Extension, setup  # noqa: E402
from setuptools.command.build_ext import build_ext  # noqa: E402


def say(line, end="\n"):
    """Progress past pip's capture of the build's output: to the terminal when there is one (pip -v
    shows stdout as well)."""
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line + end)
    except OSError:
        sys.stderr.write(line + end)


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
        args.append("-DBUILD_SHARED_LIBS=OFF")  # the wheel holds the module alone: libqvg linked into it
        say(f"qvg: configuring the C++ extension with CMake in {build}")
        subprocess.run(args, check=True)
        jobs = str(os.cpu_count() or 1)
        say(f"qvg: building it with {jobs} jobs (about 5 minutes on 2 cores; pip -v shows the compiler's output)")
        proc = subprocess.Popen(["cmake", "--build", str(build), "--target", "qvg_python", "-j", jobs],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            sys.stdout.write(line)
            step = re.match(r"\[(\d+)/(\d+)\]", line)
            if step:
                say(f"qvg: build step {step.group(1)} of {step.group(2)}", end="\n")
        if proc.wait() != 0:
            raise RuntimeError(f"building the qvg module failed (cmake --build {build}; its output is above)")
        built = next((build / "python" / "qvg").glob("_qvg*.so"), None)
        if built is None:
            raise RuntimeError(f"the qvg module was not built (see {build}); is pybind11 / DLPack's header there?")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)
        strip = shutil.which("strip")
        if strip:  # the build keeps symbols (NO_EXTRAS); the installed module does not need them
            subprocess.run([strip, "--strip-unneeded", str(target)], check=True)
        say(f"qvg: built {target.name}")


setup(
    version=project_version(),
    packages=["qvg"],
    package_dir={"qvg": "python/qvg"},
    ext_modules=[Extension("qvg._qvg", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
