"""No import circles between the project's own modules, read from grimp's import graph."""

from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
from django.apps import apps
from django.conf import settings


def first_party_packages() -> tuple[str, ...]:
    """The installed apps that are packages of this repository (not Django's, not a library's),
    as top-level package names: a new app is checked without being listed here."""
    root = Path(settings.BASE_DIR).resolve()
    names = set()
    for config in apps.get_app_configs():
        # A folder of the repository's top level (a virtualenv inside the checkout is not).
        top = Path(config.path).resolve()
        while top.parent != root and top.parent != top:
            top = top.parent
        if top.parent == root and "site-packages" not in Path(config.path).parts:
            names.add(config.name.split(".")[0])
    return tuple(sorted(names))


def import_graph(packages: Iterable[str]) -> dict[str, set[str]]:
    """module -> the first-party modules it imports, at module level or inside a function
    (grimp sees both: a lazy import is still an arrow between the two modules). Migrations
    are left out: Django imports them, nothing else does."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    modules = {m for m in graph.modules if ".migrations" not in m and not m.endswith("migrations")}
    return {
        module: {m for m in graph.find_modules_directly_imported_by(module) if m in modules}
        for module in modules
    }


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module that imports
    itself), each sorted, by Tarjan's algorithm written without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        # Each frame: a module and the iterator over what it imports still to visit.
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for target in imported:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges[target]))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1 or module in edges[module]:
                        found.append(sorted(component))
    return sorted(found)


def test_circles_are_found_with_every_module_in_them():
    edges = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": set(),
        "e": {"e"},
        "f": {"d"},
    }
    assert circles(edges) == [["a", "b", "c"], ["e"]]


def test_the_first_party_packages_are_the_apps_of_this_repository():
    packages = first_party_packages()
    assert {"guardian_core", "runs", "escalations", "policies", "demo"} <= set(packages)
    assert "django" not in packages
    assert "rest_framework" not in packages


def test_no_module_imports_itself_back_through_others():
    packages = first_party_packages()
    edges = import_graph(packages)
    checked = circles(edges)
    said = []
    for circle in checked:
        members = set(circle)
        arrows = [f"    {m} -> {t}" for m in circle for t in sorted(edges[m] & members)]
        said.append(f"{len(circle)} modules: {', '.join(circle)}\n" + "\n".join(arrows))
    assert not checked, (
        f"{len(checked)} import circle(s) among {', '.join(packages)}; turn an arrow "
        "around (a signal, a port passed in, a task named by string):\n" + "\n".join(said)
    )
