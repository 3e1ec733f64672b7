# SPDX-License-Identifier: Apache-2.0
"""The build step of `pip install .` (pyproject.toml): make builds ddprun and ddp-rendezvous (no
CUDA needed for those two), and the wheel carries them as data files for the environment's bin/,
tagged for this platform: they are native programs."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution
from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("DDPRUN_WHEEL_BUILD", "build-wheel")
PROGRAMS = ["ddprun", "ddp-rendezvous"]


class BuildPrograms(build_ext):
    """The native part of the build: make, for the two programs (no Python extension)."""

    def run(self):
        jobs = str(os.cpu_count() or 1)
        targets = ["%s/%s" % (BUILD, p) for p in PROGRAMS]
        # A plain build whatever make this runs under (make test passes SANITIZE and the like
        # down through MAKEFLAGS).
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        subprocess.check_call(["make", "-j" + jobs, "BUILD=" + BUILD] + targets, cwd=HERE, env=env)


class NativeDistribution(Distribution):
    """Not pure Python: the wheel gets this platform's tag."""

    def has_ext_modules(self):
        return True


class ProgramsWheel(bdist_wheel):
    """Programs, not a Python extension: any Python 3 on this platform can install the wheel."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(
    distclass=NativeDistribution,
    cmdclass={"build_ext": BuildPrograms, "bdist_wheel": ProgramsWheel},
    data_files=[("bin", ["%s/%s" % (BUILD, p) for p in PROGRAMS])],
)
