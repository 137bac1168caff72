"""The package's import graph: no cycles, no import against the layer order, and the package's
own imports at the top of its modules (docs/development.md states the order)."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
# lowest first; a module may import from its own layer (within its folder) and any lower one
LAYERS = [
    {"sdbench", "ids", "files", "layout", "logcause", "script_log", "host",
     "variance", "metrics"},  # ground
    {"data", "models"},
    {"plan"},
    {"records"},
    {"measure", "analyze"},
    {"report"},
]


def _name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in (SRC / "sdbench").rglob("*.py")}


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported package module, line, at top level) for each import of this package's modules."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # `from pkg import mod` imports the module; `from mod import name` the module
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        else:
            continue
        found += [(n, node.lineno, id(node) in top) for n in names if n in MODULES and n != module]
    return found


def layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else parts[0]
    for i, members in enumerate(LAYERS):
        if key in members:
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS: add its folder to the order")


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_has_a_layer():
    assert len(MODULES) > 40
    for module in MODULES:
        layer(module)


def test_no_import_against_the_layer_order():
    wrong = []
    for module in MODULES:
        for target, line, _ in _imports(module):
            upward = layer(target) > layer(module)
            sideways = (layer(target) == layer(module) > 0
                        and _folder(target) != _folder(module))
            if upward or sideways:
                wrong.append(f"{MODULES[module].relative_to(SRC)}:{line} imports {target}")
    assert wrong == []


def test_no_import_cycle():
    graph = {m: {t for t, _, _ in _imports(m)} for m in MODULES}
    cycles = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_package_imports_its_own_modules_at_the_top():
    inner = [f"{MODULES[m].relative_to(SRC)}:{line} imports {t} inside a function"
             for m in MODULES for t, line, top in _imports(m) if not top]
    assert inner == []


@pytest.mark.parametrize("source, wrong", [
    ("from sdbench.measure.gpumon import x\n", "sdbench.measure.gpumon"),
    ("def f():\n    from sdbench.report import pages\n", "sdbench.report.pages"),
])
def test_the_check_sees_an_upward_import(tmp_path, monkeypatch, source, wrong):
    """The checks above would fail: a plan module importing measure/ (at the top or inside a
    function) is an upward import."""
    fake = tmp_path / "sdbench" / "plan" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(source)
    monkeypatch.setitem(MODULES, "sdbench.plan.fake", fake)
    found = _imports("sdbench.plan.fake")
    assert [t for t, _, _ in found] == [wrong]
    assert layer(wrong) > layer("sdbench.plan.fake")


def test_the_workflow_parse_imports_no_plotting_or_statistics_library():
    """Every Snakemake parse (a dry run, each cluster job's own) imports what
    workflow/rules/common.smk imports: scipy, pandas and matplotlib take about a second to
    import and none of them is needed to plan the cells, so the modules it reads import them
    only where a function uses them."""
    import re
    import subprocess
    import sys

    common = (SRC.parent / "workflow" / "rules" / "common.smk").read_text()
    statement = r"^(?:from sdbench\S* import \([^)]*\)|(?:from|import) sdbench.*)$"
    imports = "\n".join(re.findall(statement, common, re.M))
    assert "sdbench.plan" in imports
    heavy = ("scipy", "pandas", "matplotlib", "seaborn", "pyarrow")
    code = f"import sys\n{imports}\nprint(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC)}, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_each_speedup_is_defined_once():
    """A speedup's name, the record's metric it is a ratio of and its direction are defined in
    `sdbench.metrics` only: no other module pairs a speedup's name with its metric in a
    literal (as `stopping.METRICS` and `aggregate.SPEEDUPS` each did)."""
    from sdbench.metrics import SPEEDUPS

    def constants(nodes) -> set:
        return {n.value for n in nodes if isinstance(n, ast.Constant)}

    def groups(tree):
        """The literals a definition would pair them in: a tuple's items, and a dict entry's
        key with its value (or the value's items)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple):
                yield constants(node.elts)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    items = value.elts if isinstance(value, ast.Tuple) else [value]
                    yield constants([key, *items])

    def pairings(tree) -> list[str]:
        return [s.name for group in groups(tree) for s in SPEEDUPS.values()
                if {s.name, s.metric} <= group]

    found = {module: pairs for module, path in MODULES.items() if module != "sdbench.metrics"
             and (pairs := pairings(ast.parse(path.read_text())))}
    assert not found, found
    # (the check sees one)
    assert pairings(ast.parse('METRICS = {"q": ("tpot_speedup", "mean_tpot_ms", False)}'))


def test_no_module_is_over_600_lines():
    """Each module does one job: none of the package's modules grows past 600 lines (split it
    by concern, as report/plots.py, plan/grid.py and plan/cost.py were)."""
    long = {module: n for module, path in MODULES.items()
            if (n := len(path.read_text().splitlines())) > 600}
    assert not long, long
