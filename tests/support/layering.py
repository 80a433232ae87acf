"""The layers of ``aigc_hub``, listed once, and an AST checker for imports that cross them.

=========  ==========================================  ======================================
layer      modules                                     may import (of ``aigc_hub``)
=========  ==========================================  ======================================
backbone   :data:`BACKBONE`, and the package root      the backbone
namespace  ``aigc_hub.pipelines`` (its ``__init__``)   the backbone
pipeline   ``aigc_hub.pipelines.<name>``               the backbone, its own folder, the
                                                       namespace, :data:`HTTP_KIT` and
                                                       :data:`CLI_KIT`; its
                                                       up hook (:data:`UP_HOOK_MODULE`) also
                                                       the providers
provider   ``aigc_hub.providers.<name>`` (outside      the backbone and its own folder: a
           systems the hub ships, e.g. the local       vendor does not import our code
           provider simulator)
interface  :data:`INTERFACES` (HTTP, console, CLI)     everything but ``testing``
testing    ``aigc_hub.testing`` (test doubles)         the backbone, pipelines (it fakes
                                                       their adapters), itself
client     ``aigc_hub.client`` (the Python SDK)        only itself: it ships apart from the
                                                       server
=========  ==========================================  ======================================

Every import statement counts, wherever it stands (inside functions, under
``TYPE_CHECKING``, relative ones resolved), and a module in no layer is itself a breach, so
a new top-level package must be placed here first. Loading by name at run time
(``module:attribute`` settings, entry points, the modules a ``Pipeline`` names) is not
an import statement: it is how the backbone finds pipelines. ``docs/pipelines.md``
("Layers") says the same in prose.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "aigc_hub"

#: The backbone: patterns every pipeline shares; it names no pipeline and no interface.
BACKBONE = frozenset(
    {
        "core",
        "messaging",
        "reliability",
        "schemas",
        "store",
        "blobs",
        "cache",
        "runtime",
        "observability",
        "media",
        "moderation",
        "egress",
        "settings",
        "bootstrap",
        "hub_config",
        "pipeline",
        "plugins",
        "tenancy",
    }
)

#: The ways in (HTTP and console under ``interfaces``, the CLI and ``python -m``).
INTERFACES = frozenset({"interfaces", "cli", "__main__"})

#: The one module of ``interfaces`` a pipeline may import: what its HTTP routers need.
HTTP_KIT = f"{PACKAGE}.interfaces.http.kit"

#: The one module of ``cli`` a pipeline may import: what its ``cli.py`` needs.
CLI_KIT = f"{PACKAGE}.cli.kit"

#: The one module of a pipeline that may import a provider: its ``up`` hook, which serves
#: that outside system in-process on embedded defaults. Everything else of the pipeline
#: knows a provider only through its adapter's protocol, as it would a vendor's.
UP_HOOK_MODULE = "up"


class Layer(enum.Enum):
    """Where a module stands; see the table in this module's docstring."""

    BACKBONE = "the backbone"
    NAMESPACE = "the pipelines namespace"
    PIPELINE = "a pipeline"
    HTTP_KIT = "the HTTP kit"
    CLI_KIT = "the CLI kit"
    INTERFACE = "an interface"
    TESTING = "the test doubles"
    CLIENT = "the client"
    PROVIDER = "a provider"
    UNPLACED = "no layer"


_EVERYTHING_BUT_TESTING = frozenset(Layer) - {Layer.TESTING, Layer.UNPLACED}

#: What each layer may import; a pipeline or provider additionally only its own folder, and
#: only a pipeline's up hook a provider (see `_rule`).
ALLOWED: dict[Layer, frozenset[Layer]] = {
    Layer.BACKBONE: frozenset({Layer.BACKBONE}),
    Layer.NAMESPACE: frozenset({Layer.BACKBONE}),
    Layer.PIPELINE: frozenset(
        {
            Layer.BACKBONE,
            Layer.NAMESPACE,
            Layer.PIPELINE,
            Layer.HTTP_KIT,
            Layer.CLI_KIT,
            Layer.PROVIDER,
        }
    ),
    Layer.HTTP_KIT: _EVERYTHING_BUT_TESTING,
    Layer.CLI_KIT: _EVERYTHING_BUT_TESTING,
    Layer.INTERFACE: _EVERYTHING_BUT_TESTING,
    Layer.TESTING: frozenset({Layer.BACKBONE, Layer.NAMESPACE, Layer.PIPELINE, Layer.TESTING}),
    Layer.CLIENT: frozenset({Layer.CLIENT}),
    Layer.PROVIDER: frozenset({Layer.BACKBONE, Layer.PROVIDER}),
    Layer.UNPLACED: frozenset(),
}


@dataclass(frozen=True)
class Place:
    """A module's layer; for a pipeline or provider module also its name, and whether the
    module is a pipeline's up hook."""

    layer: Layer
    pipeline: str | None = None  # the pipeline's name, or the provider's
    up_hook: bool = False


@dataclass(frozen=True)
class Breach:
    """One import that crosses the layers: where it stands, what it imports, which rule."""

    path: str
    line: int
    imported: str | None  # None: the module itself is the breach
    rule: str

    def __str__(self) -> str:
        what = f" imports {self.imported}" if self.imported else ""
        return f"{self.path}:{self.line}{what}: {self.rule}"


def place_of(module: str) -> Place:
    """The layer of dotted ``module`` (a name inside :data:`PACKAGE`)."""
    parts = module.split(".")
    if len(parts) == 1:
        return Place(Layer.BACKBONE)  # the package root: the public API of the backbone
    top = parts[1]
    if top in BACKBONE:
        return Place(Layer.BACKBONE)
    if top == "pipelines":
        if len(parts) == 2:
            return Place(Layer.NAMESPACE)
        up_hook = parts[3:] == [UP_HOOK_MODULE]
        return Place(Layer.PIPELINE, parts[2], up_hook=up_hook)
    if top == "providers":
        return Place(Layer.PROVIDER, parts[2] if len(parts) > 2 else None)
    if module == HTTP_KIT:
        return Place(Layer.HTTP_KIT)
    if module == CLI_KIT:
        return Place(Layer.CLI_KIT)
    if top in INTERFACES:
        return Place(Layer.INTERFACE)
    if top == "testing":
        return Place(Layer.TESTING)
    if top == "client":
        return Place(Layer.CLIENT)
    return Place(Layer.UNPLACED)


def _rule(importer: Place, imported: Place) -> str | None:
    """Why ``importer`` may not import ``imported``, or None when it may."""
    if imported.layer is Layer.UNPLACED:
        return "the imported module is in no layer"
    if imported.layer not in ALLOWED[importer.layer]:
        if importer.layer is Layer.PIPELINE and imported.layer is Layer.INTERFACE:
            return (
                f"a pipeline takes only the HTTP kit ({HTTP_KIT}) and the CLI kit ({CLI_KIT}) "
                "from the interfaces"
            )
        return f"{importer.layer.value} may not import {imported.layer.value}"
    if importer.layer is Layer.PIPELINE and imported.layer is Layer.PROVIDER:
        if not importer.up_hook:
            return f"a pipeline imports a provider only in its up hook ({UP_HOOK_MODULE}.py)"
        return None
    other = imported.layer is importer.layer and imported.pipeline != importer.pipeline
    if importer.layer is Layer.PIPELINE and other:
        return f"pipeline {importer.pipeline!r} imports pipeline {imported.pipeline!r}"
    if importer.layer is Layer.PROVIDER and other and imported.pipeline is not None:
        return f"provider {importer.pipeline!r} imports provider {imported.pipeline!r}"
    return None


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    """The dotted name of ``path`` under package folder ``root``, and whether it is a package."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imported_modules(
    tree: ast.AST, module: str, is_package: bool, known: frozenset[str]
) -> Iterator[tuple[int, str]]:
    """Each ``(line, module)`` imported anywhere in ``tree``, relative imports resolved.

    ``from a import b`` counts as importing ``a.b`` when that is a module in ``known``,
    else as importing ``a``.
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")  # level 1 is the package itself, 2 its parent…
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield node.lineno, candidate if candidate in known else base


def check_tree(root: Path) -> list[Breach]:
    """Every breach of the layers in the package folder ``root`` (e.g. ``src/aigc_hub``)."""
    files = sorted(root.rglob("*.py"))
    names = {path: _module_name(path, root) for path in files}
    known = frozenset(name for name, _ in names.values())
    breaches: list[Breach] = []
    for path in files:
        module, is_package = names[path]
        shown = str(path.relative_to(root.parent))
        importer = place_of(module)
        if importer.layer is Layer.UNPLACED:
            rule = f"{module} is in no layer: place it in {__name__}"
            breaches.append(Breach(shown, 1, None, rule))
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        # ``from m import a, b`` yields ``m`` twice when a and b are names, not modules
        for line, imported in dict.fromkeys(imported_modules(tree, module, is_package, known)):
            if imported.split(".")[0] != PACKAGE:
                continue
            broken = _rule(importer, place_of(imported))
            if broken is not None:
                breaches.append(Breach(shown, line, imported, broken))
    return breaches
