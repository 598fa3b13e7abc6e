from setuptools import find_namespace_packages, setup

# Everything else is in pyproject.toml.  Automatic package discovery cannot add a package
# whose directory is mapped elsewhere (cupy_csrattn.cuda -> cuda/), so the list is built
# here: every package under cupy_csrattn/, plus the kernels.
setup(
    packages=find_namespace_packages(include=["cupy_csrattn", "cupy_csrattn.*"], exclude=["*.__pycache__"])
    + ["cupy_csrattn.cuda"],
)
