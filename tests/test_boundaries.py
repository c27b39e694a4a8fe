"""`appliance/` is the engine: it never imports the terminal UI, statically or at run time."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_appliance_module_imports_tui():
    offenders = []
    for path in (ROOT / "appliance").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "tui" or n.startswith(("tui.", "textual"))]
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
        "for m in pkgutil.iter_modules(appliance.__path__):\n"
        "    importlib.import_module('appliance.' + m.name)\n"
        "from appliance.cli import main\n"
        "sys.argv = ['floe', 'stream', 'list', '--format', 'json']\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={"FLOE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
