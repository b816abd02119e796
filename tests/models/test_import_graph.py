"""The package's modules import each other without a cycle (function-level imports included): the hub
interface does not import the models that name it."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fairseq_normformer"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set) -> set:
    """The package modules ``path`` imports anywhere in its body (``from .x import y`` may name module x.y)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            base = node.module if node.level == 0 else base
            candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in modules)
    return found


def find_cycle(graph: dict):
    """One cycle of ``graph`` as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def package_graph(under: str) -> dict:
    """Import edges between the modules of ``under`` (a folder of the package), parent packages left out."""
    paths = {module_name(p): p for p in (PACKAGE / under).rglob("*.py")}
    return {name: imported_modules(path, set(paths)) - {name} for name, path in paths.items()}


def test_find_cycle_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_models_import_no_cycle():
    graph = package_graph("models")
    assert "fairseq_normformer.models.normformer_bert" in graph["fairseq_normformer.models.lambert"]  # edges are read
    graph = {name: edges - {"fairseq_normformer.models"} for name, edges in graph.items()}
    assert find_cycle(graph) is None
