"""The wheel's setup script, run by scripts/wheel in its staging folder (python3 -m build): the
memtrace package with the relocatable bundle inside it (memtrace/_bundle), the `memtrace` command
on PATH, and the tag py3-none-<platform>: the package runs on any CPython 3, and what binds it to
a platform is only the bundle's glibc floor (MEMTRACE_WHEEL_PLATFORM, measured by scripts/wheel)."""

import os

from setuptools import setup
from setuptools.dist import Distribution
from wheel.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # native code inside: a platform wheel, installed to platlib
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", os.environ["MEMTRACE_WHEEL_PLATFORM"]


bundle_files = []
for root, _, files in os.walk("memtrace/_bundle"):
    bundle_files += [os.path.relpath(os.path.join(root, f), "memtrace") for f in files]

setup(
    name="memtrace",
    version=os.environ["MEMTRACE_WHEEL_VERSION"],
    description="GPU memory profiler and snapshot recorder for CUDA programs",
    python_requires=">=3.8",
    packages=["memtrace"],
    package_data={"memtrace": bundle_files},
    entry_points={"console_scripts": ["memtrace = memtrace.__main__:main"],
                  "pytest11": ["memtrace = memtrace.pytest_plugin"]},
    distclass=BinaryDistribution,
    cmdclass={"bdist_wheel": PlatformWheel},
    zip_safe=False,
)
