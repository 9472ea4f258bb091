"""Build steps that pyproject.toml cannot declare: the cffi binding of the pure C core
(echomq._core) and the trafikey Valkey module (echomq/trafikey.so), both from native/."""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(HERE, "native")


class BuildWithModule(build_ext):
    """Builds the cffi extensions, then trafikey.so with native/Makefile, placed in the package."""

    def run(self) -> None:
        if shutil.which("make") is None or shutil.which(os.environ.get("CC", "cc")) is None:
            raise SystemExit(
                "echomq needs a C compiler (cc) and make to build its Valkey module trafikey.so "
                "and its cffi core; install them (Debian: apt-get install build-essential) and "
                "retry"
            )
        super().run()
        subprocess.check_call(["make", "-C", NATIVE, "trafikey.so"])
        built = os.path.join(NATIVE, "trafikey.so")
        targets = [os.path.join(self.build_lib, "echomq")]
        if self.inplace:
            targets = [os.path.join(HERE, "echomq")]
        for target in targets:
            os.makedirs(target, exist_ok=True)
            shutil.copy2(built, os.path.join(target, "trafikey.so"))


setup(
    cffi_modules=["native/build_core.py:ffibuilder"],
    cmdclass={"build_ext": BuildWithModule},
)
