"""The demo finds the repository's files from where its module sits (a move of the module
once left it looking inside the package, found only by a fresh clone's `make demo`)."""

from __future__ import annotations

from coscheduling.commands import demo


def test_the_demo_finds_the_repositorys_manifests_and_scripts() -> None:
    for path in ("deploy/start.sh", "crd/compat", "examples", "pyproject.toml"):
        assert (demo.REPO / path).exists(), demo.REPO / path
