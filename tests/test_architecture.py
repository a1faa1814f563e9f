"""The shape of the house (docs/architecture.md): no import circle in parcalc/, imports that run down
the layers, a library that runs without Click, and the library's signatures written from the
commands' flags."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "parcalc"

# docs/architecture.md, "The layers", lowest first: a module imports from its own layer or a lower one.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("parcalc", "parcalc.units", "parcalc.errors", "parcalc.messages", "parcalc.frozen", "parcalc.named_tuple",
                "parcalc.code_cache", "parcalc.sealed_file", "parcalc.derivation", "parcalc.json_keys", "parcalc.files",
                "parcalc.streams", "parcalc.resources")),
    ("core", ("parcalc.core",)),
    ("data", ("parcalc.presets", "parcalc.preset_files", "parcalc.strict_yaml", "parcalc.preset_doc", "parcalc.preset_hardware",
              "parcalc.preset_models", "parcalc.preset_frameworks", "parcalc.preset_cache", "parcalc.preset_verdicts", "parcalc.hf_config", "parcalc.hf_architectures", "parcalc.timings_file", "parcalc.flags")),
    ("results and renderers", ("parcalc.results", "parcalc.render", "parcalc.output")),
    ("library", ("parcalc.api", "parcalc.results.run", "parcalc.runfile", "parcalc.sweeps", "parcalc.worksheet", "parcalc.schema",
                 "parcalc.calibrate_runner")),
    ("command line", ("parcalc.commands", "parcalc.cli", "parcalc.__main__", "parcalc.completion", "parcalc.docs_cli", "parcalc.signatures")),
)  # fmt: skip

# Imports that run up a layer, each with why; a new one fails test_imports_run_down_the_layers.
# None today: Result.to_dict is the data's own (parcalc.derivation.result_record) and the Jupyter hooks reach the renderers through
# parcalc.derivation.PRESENTERS, which parcalc.render.display fills when parcalc.api loads it (before session 20:
# derivation.py imported render/display.py inside the methods; before session 21 parcalc.results loaded display, whose
# to_dict was the JSON renderer's: an arrow from the results up to the renderers, which import the worksheet above them).
UPWARD: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imported(node: ast.AST, package: str, modules: dict[str, Path]) -> list[str]:
    """The parcalc modules an import statement loads (a name imported from a package: its module if
    it is one, else the package)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.append(name)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the parcalc modules it imports, at its top or inside a function; imports under
    `if TYPE_CHECKING:` are for the type checker and load nothing."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def visit(node: ast.AST, name: str, package: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other, name, package)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                graph[name].update(m for m in _imported(child, package, modules) if m != name)
            visit(child, name, package)

    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        visit(ast.parse(path.read_text(encoding="utf-8")), name, package)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def layer_of(module: str) -> int:
    best = max(((i, len(prefix)) for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), key=lambda pair: pair[1], default=None)  # fmt: skip
    assert best is not None, f"{module} is in no layer: name it in LAYERS (and in docs/architecture.md)"
    return best[0]


def test_the_graph_sees_imports_inside_functions_and_not_type_checking_ones() -> None:
    graph = import_graph()
    assert "parcalc.render.markdown" in graph["parcalc.render.display"]  # a function-level import (result_markdown)
    assert not [m for m in graph["parcalc.derivation"] if m.startswith("parcalc.render")]  # the data imports no renderer
    assert "parcalc.derivation" not in graph["parcalc.render.markdown"]  # types only, under TYPE_CHECKING
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    # Before issue 29 there were six: cli / runfile / worksheet, comm data_parallel / expert / tensors,
    # memory / expert_parallel (/ offload), timing compute / moe, derivation / the renderers, output / csv_out.
    assert circles(import_graph()) == []


def test_imports_run_down_the_layers() -> None:
    graph = import_graph()
    upward = {(a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)}
    assert upward <= set(UPWARD), f"imports running up a layer: {sorted(upward - set(UPWARD))}"


def test_a_library_call_loads_neither_click_nor_typer() -> None:
    # issue 29's check, and every command of the library
    code = """
import sys, parcalc
from parcalc import api
parcalc.memory(model='llama3-8b', seq_len=4096, gpu='h100-sxm5')
api.peak_flops(gpu='a100-sxm4-80gb', dtype='tf32')
parcalc.intensity(m=4096, k=4096, n=4096, dtype='fp16', gpu='h100-sxm5')
parcalc.bubble(pp=4, micro_batches=8, schedule='interleaved')
parcalc.flops(model='llama3-8b', seq_len=4096, batch=8)
parcalc.comm_volume(collective='all-reduce', size='1GB', gpus=8)
parcalc.comm_volume(strategy='zero1', model='llama3-8b', gpus=8, micro_batch=1, seq_len=4096)
parcalc.scaling(model='llama3-8b', gpu='h100-sxm5', gpus='8,16', strategy='zero3', batch=64, seq_len=4096)
parcalc.presets_list('gpus')
parcalc.presets_show('nvlink4')
parcalc.fit(model='llama3-8b', gpu='h100-sxm5', gpus=8, seq_len=4096)
parcalc.fit(model='llama3-8b', gpu='h100-sxm5', gpus=8, batch=16, seq_len=4096, tp=1, pp=1, dp=8, zero=1)
parcalc.analyze('lab-ddp-timings.csv', time_is='epoch')
parcalc.sweep('bubble', {'pp': [2, 4]}, micro_batches=8)
print(sorted(m for m in ('typer', 'click', 'rich', 'parcalc.cli', 'parcalc.commands') if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_the_library_signatures_are_the_commands_flags() -> None:
    """parcalc/results/signatures.json is what parcalc.signatures writes from the commands:
    regenerate it (python -m parcalc.signatures > parcalc/results/signatures.json) when a
    flag changes."""
    from parcalc.signatures import signatures

    written = json.loads((PACKAGE / "results" / "signatures.json").read_text(encoding="utf-8"))
    assert written == signatures()


def test_every_command_of_the_library_has_its_results_module() -> None:
    from parcalc.api import COMMAND_FUNCTIONS
    from parcalc.results import MODULES

    assert set(MODULES) == set(COMMAND_FUNCTIONS.values())


@pytest.mark.parametrize(("call", "flag"), [
    ({"pp": 4, "micro_batches": 8, "schedule": "foo"}, "--schedule"),
    ({"micro_batches": 8}, "--pp"),
])  # fmt: skip
def test_the_library_says_what_the_command_line_says(runner, call: dict, flag: str) -> None:
    """A bad choice, a missing flag: Click's words on the command line, the same from Python."""
    import parcalc
    from parcalc.cli import app
    from parcalc.errors import InputError

    args = ["bubble"] + [x for key, value in call.items() for x in (f"--{key.replace('_', '-')}", str(value))]
    cli = runner.invoke(app, args)
    line = cli.stderr.strip().removeprefix("Error: ").split(" (see 'parcalc bubble --help')")[0]
    assert flag in line
    with pytest.raises(InputError) as raised:
        parcalc.bubble(**call)
    assert str(raised.value).split(" (from bubble())")[0] == line


def test_the_results_layer_loads_no_renderer_and_the_library_hands_the_presenters_in() -> None:
    """parcalc.derivation and parcalc.results import no renderer, and a Result turns into its plain form (to_dict,
    parcalc.derivation.result_record) without one; parcalc.api loads render/display.py, which fills PRESENTERS for Jupyter's hooks,
    and no other renderer until a result is shown (docs/architecture.md)."""
    code = """
import sys
import parcalc.derivation as d
assert not [m for m in sys.modules if m.startswith("parcalc.render")] and d.PRESENTERS == {}, sorted(sys.modules)
import parcalc.results
from parcalc.results.bubble import from_flags
plain = from_flags(pp=4, micro_batches=8).to_dict()
assert plain["command"] == "bubble" and plain["schema_version"] == 1
result = from_flags(pp=4, micro_batches=8)
assert result._repr_markdown_() is None and result._repr_html_() is None  # IPython skips a None: the plain repr shows
assert not [m for m in sys.modules if m.startswith("parcalc.render")] and d.PRESENTERS == {}, sorted(sys.modules)
import parcalc.api
assert sorted(d.PRESENTERS) == ["html", "markdown"]
assert [m for m in sys.modules if m.startswith("parcalc.render.")] == ["parcalc.render.display"], sorted(sys.modules)
assert result._repr_markdown_().startswith("#") and "<" in result._repr_html_()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
