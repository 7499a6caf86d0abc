"""The import graph, checked by grimp (imports under TYPE_CHECKING and inside functions
count): no module imports one of a higher layer, and no import circle anywhere. The layers
are the architecture page's, top to bottom; ``keyqueue/__init__.py`` and
``keyqueue/aio/__init__.py`` only gather the public names, so they stand outside."""

from __future__ import annotations

import grimp
import pytest

LAYERS = [
    "keyqueue.cli",
    "keyqueue.serve | keyqueue.demo",
    "keyqueue.sqs | keyqueue.spark",
    "keyqueue.web",
    "keyqueue.reaper",
    "keyqueue.queue | keyqueue.aio.queue",  # the faces (their .worker decorator builds workers)
    "keyqueue.worker | keyqueue.fsck",
    "keyqueue.face",  # what both faces share
    "keyqueue.message | keyqueue.aio.message",
    "keyqueue.backends | keyqueue.transport",
    "keyqueue.core",
    "keyqueue.settings | keyqueue.keys | keyqueue.health | keyqueue.connection | keyqueue.server",
    "keyqueue.pools | keyqueue.sentinels | keyqueue.clusters",  # the pools, Sentinel managers and cluster client a URL gets
    "keyqueue.errors",
]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("keyqueue", include_external_packages=False, cache_dir=None)


def test_imports_go_downward_only(graph: grimp.ImportGraph) -> None:
    layers = [grimp.Layer(*(m.strip() for m in layer.split("|")), independent=False) for layer in LAYERS]
    illegal = graph.find_illegal_dependencies_for_layers(layers=layers)
    assert not illegal, "\n".join(
        f"{d.importer} imports {d.imported}: {sorted(r.heads)} -> {sorted(r.tails)}" for d in illegal for r in d.routes
    )


def test_no_import_circle(graph: grimp.ImportGraph) -> None:
    circles = {
        (m, n)
        for m in graph.modules
        for n in graph.find_modules_directly_imported_by(m)
        if graph.chain_exists(importer=n, imported=m)
    }
    assert not circles, sorted(circles)


def test_every_module_is_in_a_layer(graph: grimp.ImportGraph) -> None:
    """A new module must take a place in the layers (or the check would not see it)."""
    placed = [m.strip() for layer in LAYERS for m in layer.split("|")]
    gathering = {"keyqueue", "keyqueue.__main__", "keyqueue.aio", "keyqueue.lua"}
    loose = [
        m for m in graph.modules if m not in gathering and not any(m == p or m.startswith(p + ".") for p in placed)
    ]
    assert not loose, loose
