"""The shape of the code, checked from its own imports: layers along the data path, no circles,
an engine that never imports its UI, small units, and every runtime import declared."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Which packages of `appliance` each one may import: lower layers only, along the data path
# kafka -> model -> decode -> tables -> ingest, with maintenance, stages, query, views and control
# beside them. `tables` knows what rows are (`model`), never how messages become rows (`decode`).
# `mergeonread` (upsert tables' keys, deletes and rewrites) sits on `tables`; `decode` asks only its
# pure precedence rule (which message of a key is newest), which imports nothing of Floe's.
_BELOW_INGEST = {"core", "config", "kafka", "model", "decode", "spark", "tables", "mergeonread", "state"}
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "config": {"core"},
    "kafka": {"core"},
    "standins": {"core"},
    "spark": {"core", "config"},
    "model": {"core", "kafka"},
    "decode": {"core", "kafka", "model", "mergeonread"},
    "tables": {"core", "config", "model"},
    "mergeonread": {"core", "config", "model", "tables"},
    "state": {"core", "config", "kafka", "model"},
    "query": {"core", "config", "tables"},
    "maintenance": {"core", "config", "model", "spark", "tables", "mergeonread", "state"},
    "stages": {"core", "config", "model", "spark", "tables", "state"},
    "observe": {"core", "config", "kafka", "model", "tables", "state"},
    "auditor": {"core", "config", "kafka", "model", "decode", "tables", "mergeonread", "state", "query"},
    "ingest": _BELOW_INGEST | {"maintenance", "stages", "observe"},
    "deadletters": _BELOW_INGEST | {"query", "ingest"},
    "views": {"core", "config", "model", "tables", "state", "query", "maintenance"},
    "control": {"core", "config", "kafka", "model", "decode", "tables", "state", "views", "spark", "stages",
                "maintenance", "deadletters", "observe"},
    "demo": {"core", "config", "kafka", "model", "standins", "tables", "state", "ingest", "control"},
    "testing": _BELOW_INGEST | {"standins", "ingest", "stages", "query", "control", "auditor"},
    "cli": _BELOW_INGEST | {"standins", "ingest", "maintenance", "stages", "observe", "query", "views", "control",
                            "demo", "cli", "auditor", "deadletters"},
}
# The UI reaches the engine through its operations and read models only, and the plain data
# they hand over: typed state records and Kafka connection settings.
TUI_ALLOWED = {"core", "config", "model", "query", "views", "control", "auditor"}
TUI_ALLOWED_MODULES = {"appliance.state.records", "appliance.kafka.settings"}

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """Import nodes under `if TYPE_CHECKING:`: they never run."""
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(ast.walk(node))
    return skipped


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports at run time (top level or inside functions), absolute names."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}"))
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_layer_table_names_every_package():
    packages = {p.name for p in (ROOT / "appliance").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED)


def test_no_package_imports_a_layer_above_its_own():
    offenders = []
    for path in _sources("appliance"):
        own = _layer(_module_name(path))
        for imported in imports_of(path):
            if imported.startswith("appliance.") and _layer(imported) != own \
                    and _layer(imported) not in ALLOWED.get(own, set()):
                offenders.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert offenders == []


def test_decode_asks_merge_on_read_only_its_precedence_rule():
    """The rule is pure (numpy): decoding in a Spark task never pulls in the index or the table code."""
    offenders = [f"{path.relative_to(ROOT)} imports {name}" for path in _sources("appliance/decode")
                 for name in imports_of(path) if _layer(name) == "mergeonread"
                 and name not in ("appliance.mergeonread", "appliance.mergeonread.precedence")]
    precedence = ROOT / "appliance" / "mergeonread" / "precedence.py"
    assert offenders == [] and not [n for n in imports_of(precedence) if n.startswith("appliance.")]


def test_no_import_circles():
    graph: dict[str, set[str]] = {}
    for package in ("appliance", "tui"):
        for path in _sources(package):
            graph[_module_name(path)] = {m for m in imports_of(path) if m.split(".")[0] in ("appliance", "tui")
                                         and m != _module_name(path)}

    def walk(node: str, trail: list[str], done: set[str]) -> list[str] | None:
        if node in trail:
            return trail[trail.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            # Importing a submodule runs its package's __init__ first: a package is its own node.
            cycle = walk(nxt, trail + [node], done)
            if cycle:
                return cycle
        done.add(node)
        return None

    done: set[str] = set()
    for module in sorted(graph):
        assert walk(module, [], done) is None, f"import circle: {' -> '.join(walk(module, [], set()) or [])}"


def test_no_appliance_module_imports_tui():
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in _sources("appliance") for name in imports_of(path)
                 if name == "tui" or name.startswith(("tui.", "textual"))]
    assert offenders == []


def test_the_ui_uses_only_the_engines_operations_and_read_models():
    offenders = [f"{path.relative_to(ROOT)} imports {name}" for path in _sources("tui") for name in imports_of(path)
                 if name.startswith("appliance.") and _layer(name) not in TUI_ALLOWED
                 and name not in TUI_ALLOWED_MODULES]
    assert offenders == []


def test_engine_runs_with_the_ui_unimportable(tmp_path):
    """Every appliance module imports, and the CLI answers, with `tui` and `textual` blocked."""
    script = (
        "import sys, importlib, pkgutil\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('tui', 'textual'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import appliance\n"
        "for m in pkgutil.walk_packages(appliance.__path__, 'appliance.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "from appliance.cli import main\n"
        "sys.argv = ['floe', 'stream', 'list', '--format', 'json']\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={"FLOE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("package", ["appliance", "tui"])
def test_units_are_small_enough_to_read(package):
    long_modules = [f"{p.relative_to(ROOT)}: {n} lines" for p in _sources(package)
                    if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    long_functions = []
    for path in _sources(package):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert long_modules == [] and long_functions == []


def test_every_runtime_import_is_declared():
    """A third-party module imported by the engine or the UI comes from a declared dependency."""
    declared = set()
    for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        name = requirement.split(";")[0].split("[")[0]
        for sep in "<>=!~ ":
            name = name.split(sep)[0]
        declared.add(name.strip().lower().replace("_", "-"))
    distributions = packages_distributions()
    stdlib = sys.stdlib_module_names
    missing = set()
    for package in ("appliance", "tui"):
        for path in _sources(package):
            for name in imports_of(path):
                top = name.split(".")[0]
                if not top or top in stdlib or top in ("appliance", "tui", "__future__"):
                    continue
                if top == "pytest" and path.parent.name == "testing":
                    continue  # the pytest plugin: only pytest itself ever imports it
                dists = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
                if not dists & declared:
                    missing.add(f"{top} ({', '.join(sorted(dists))}) in {path.relative_to(ROOT)}")
    assert sorted(missing) == [], "\n".join(sorted(missing))


def test_every_ui_class_that_runs_workers_reports_their_failures():
    """A worker's failure reaches only the node that ran it: each such class mixes in ReportsFailures."""
    silent = []
    for path in _sources("tui"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            runs_workers = any(
                isinstance(d, ast.Call) and getattr(d.func, "id", "") == "work"
                for item in node.body if isinstance(item, ast.FunctionDef) for d in item.decorator_list
            )
            if runs_workers and "ReportsFailures" not in [ast.unparse(b) for b in node.bases]:
                silent.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert silent == []


# A library's private names, by module: an upgrade of the library is checked in these places only.
PRIVATE_IMPORTS = {
    "pyiceberg": {"appliance.tables.fastpath.internals"},
    "confluent_kafka": {"appliance.decode.registered"},  # pinned exactly in pyproject.toml
}


def _private_imports(path: Path) -> set[str]:
    """Third-party modules from which `path` imports a private name (or a private module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            top = node.module.split(".")[0]
            if top in ("appliance", "tui", "__future__"):
                continue
            if any(part.startswith("_") for part in node.module.split(".")) \
                    or any(a.name.startswith("_") for a in node.names):
                found.add(top)
    return found


def test_private_names_of_libraries_are_imported_in_one_place_each():
    where: dict[str, set[str]] = {}
    for package in ("appliance", "tui"):
        for path in _sources(package):
            for top in _private_imports(path):
                where.setdefault(top, set()).add(_module_name(path))
    assert where == PRIVATE_IMPORTS


def test_only_the_fast_path_subclasses_pyiceberg():
    """Overriding PyIceberg's classes reaches under its API: that is the fast path's job alone."""
    offenders = []
    for path in _sources("appliance"):
        if _module_name(path).startswith("appliance.tables.fastpath."):
            continue
        tree = ast.parse(path.read_text(), str(path))
        pyiceberg_names = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                           and (node.module or "").startswith(("pyiceberg", "appliance.tables.fastpath.internals"))
                           for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).split(".")[0] in pyiceberg_names
                                                      for b in node.bases):
                offenders.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert offenders == []
