"""The floors of the house: imports point down (or sideways within a floor), never up, and no module
imports itself through a circle. The floor map lives here, once: a new module declares its floor by
adding its name below, which is where its author learns where it belongs (docs/architecture.md, "The floors")."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("arena", "methods", "rewards", "experiments")

# a module, or a package whose modules all share its floor (marked with ".*") -> floor
FLOORS = {
    # ground: keyed randomness, config validation, budgets, tracking, progress lines, process plumbing, reward tasks
    # (data and pure functions)
    "arena": 0, "arena.rng": 0, "arena.config": 0, "arena.budget": 0, "arena.tracking": 0, "arena.progress": 0,
    "arena.processes": 0, "arena.memory": 0, "rewards.*": 0,
    # the model: layouts, policy, sampler, tiny model
    "arena.model.*": 1,
    # the optimizers, on the model and nothing above it
    "methods.*": 2,
    # driving: what runs methods against tasks, measures and reports
    "arena.estimator_bench": 3, "arena.evaluate": 3, "arena.study": 3, "arena.runner": 3, "arena.scheduler": 3,
    "arena.tune.*": 3, "arena.report.*": 3, "arena.profiles": 3, "arena.controls": 3, "arena.archive": 3, "arena.plan.*": 3, "arena.shards": 3,
    # experiments: variants that studies name by import path and nothing in the packages imports
    "experiments.*": 3,
    # commands: parse, call the floors below, print
    "arena.cli": 4, "arena.commands": 4, "arena.__main__": 4,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imports(path: Path, known: set[str]) -> set[str]:
    """Project modules that ``path`` imports, at any depth of the file (function-level imports count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import submodule`` imports the submodule; ``from module import name`` the module
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & known
            found |= subs or {node.module}
    return {name for name in found if name in known}


def floor(name: str) -> int:
    for key, level in FLOORS.items():
        package = key.removesuffix(".*")
        if name == package or (key.endswith(".*") and name.startswith(package + ".")):
            return level
    raise AssertionError(f"{name} has no floor: declare it in FLOORS in {Path(__file__).name}")


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(path, set(found)) for name, path in found.items()}


def test_every_module_has_a_floor_and_imports_point_down():
    upward = [f"{name} (floor {floor(name)}) imports {target} (floor {floor(target)})"
              for name, targets in graph().items() for target in sorted(targets) if floor(target) > floor(name)]
    assert not upward, "imports pointing up a floor:\n" + "\n".join(upward)


def test_every_entry_of_the_map_is_a_module_or_package_that_exists():
    found = modules()
    packages = {name.rsplit(".", 1)[0] for name in found if "." in name}
    stale = [key for key in FLOORS if (key.removesuffix(".*") not in packages if key.endswith(".*") else key not in found)]
    assert not stale, f"floor map entries for modules that do not exist: {stale}"


def test_no_import_circle():
    edges = graph()
    state, circles = {}, []

    def visit(name, path):
        state[name] = "open"
        for target in sorted(edges[name]):
            if state.get(target) == "open":
                circles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_checker_sees_an_upward_import_and_a_circle(tmp_path):
    """The checks have power: a model-floor file importing a method is seen, and so is a circle."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from methods.grpo import GRPO\n    import arena.model.tiny\n")
    found = imports(source, {"methods.grpo", "arena.model.tiny", "methods"})
    assert found == {"methods.grpo", "arena.model.tiny"}
    assert floor("methods.grpo") > floor("arena.model.sampler")
    edges = graph()
    assert "arena.model.layout" in edges["arena.model.policy"]  # real edges are read


def test_no_package_imports_the_experiments():
    """Experiment-only variants (the seed's bugs) stay out of every code path a study does not name."""
    users = {name: sorted(d for d in deps if d.startswith("experiments")) for name, deps in graph().items()
             if not name.startswith("experiments")}
    assert not {name: found for name, found in users.items() if found}
