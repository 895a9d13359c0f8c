"""The repository root is the package `sprig` (pyproject.toml maps it); every folder below it with an `__init__.py`
is a subpackage, found here so that no hand-kept list can leave one out of a wheel."""

from setuptools import find_packages, setup

NOT_SHIPPED = ["tests", "tests.*", "benchmarks", "benchmarks.*", "examples", "examples.*", "build", "build.*"]

setup(packages=["sprig", *(f"sprig.{name}" for name in find_packages(".", exclude=NOT_SHIPPED))])
