"""Build steps that pyproject.toml cannot declare: the cffi binding of the pure C core
(echomq._core) and the trafikey Valkey module (echomq/trafikey.so), both from native/."""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(HERE, "native")


def strict() -> bool:
    """Warnings are errors only in the project's own builds (``make install``, CI), which set
    ECHOMQ_WERROR=1; a user's compiler may warn where ours does not."""
    return os.environ.get("ECHOMQ_WERROR") == "1"


def make_command() -> list:
    """How trafikey.so is built: native/Makefile with the environment's CC (else cc)."""
    command = ["make", "-C", NATIVE, "trafikey.so"]
    return command if strict() else [*command, "WERROR="]


class BuildWithModule(build_ext):
    """Builds the cffi extensions, then trafikey.so with native/Makefile, placed in the package."""

    def run(self) -> None:
        compiler = (os.environ.get("CC") or "cc").split()[0]
        if shutil.which("make") is None or shutil.which(compiler) is None:
            raise SystemExit(
                "echomq needs a C compiler ($CC, else cc) and make to build its Valkey module "
                "trafikey.so and its cffi core; install them (Debian: apt-get install "
                "build-essential) and retry"
            )
        super().run()
        subprocess.check_call(make_command())
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
