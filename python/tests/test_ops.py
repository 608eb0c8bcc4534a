"""The handler registry (memplan_torch/ops/): every op a handler can write is one of
memplan's, and registration refuses what is not one ATen overload of this torch, or one
registered twice.

How the op names a handler can write are found: by reading the code, not by running it.
Handlers write ops only through `Translator.emit` and `emit_multi` (translate.py), whose
first argument is the op's name. The scan below reads the whole package and holds it to
that: it fails on a call of a method named `op` (the `StepWriter.op` they wrap) outside
them, and on an `emit` whose op name is neither a string literal nor a parameter of a
function around it (a factory, such as `unary(op)`) whose every call passes a literal. So
a new handler, a new family module or a new way of choosing an op name is either seen by
the scan or fails it: there is no list to keep up by hand, as declaring each handler's
ops (`@handles(..., emits=...)`) would be, and nothing to go stale. The scan is checked
against what the exporter really writes: every op of the committed exports (ir/torch/).

memplan's op table is read from docs/IR.md's Summary table (one row per op, with its
class; a Rust test keeps that table equal to the op table in the code). An exported step
holds forward ops only (memplan's autodiff writes the backward and the optimizer), so
each name must be a `forward` row.
"""

import ast
import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

import memplan_torch
from memplan_torch.ops import HANDLERS, RegistrationError, aten, handles

from conftest import COMMITTED, REPO

PACKAGE = Path(memplan_torch.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))  # the whole package: handlers anywhere in it are scanned
WRITERS = {"emit", "emit_multi"}


def ir_op_table() -> dict[str, str]:
    """docs/IR.md's Summary table: op name -> class (forward, backward, optimizer)."""
    text = (REPO / "docs" / "IR.md").read_text()
    summary = text.split("### Summary", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|") for line in summary.splitlines() if line.startswith("| ")]
    return {cells[1].strip(): cells[3].strip() for cells in rows[1:]}  # rows[0] is the header


def _enclosing_functions(tree):
    """Each node of `tree` -> the function definitions around it, innermost first."""
    around = {}

    def visit(node, functions):
        for child in ast.iter_child_nodes(node):
            around[child] = functions
            visit(child, [child, *functions] if isinstance(child, ast.FunctionDef) else functions)

    visit(tree, [])
    return around


def _is_literal(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def scan(sources) -> tuple[set[str], list[str]]:
    """The op names the code in `sources` can write, and what in it the scan cannot read."""
    names, factories, problems = set(), {}, []
    trees = {f"{path.parent.name}/{path.name}": ast.parse(path.read_text(), str(path)) for path in sources}
    for path, tree in trees.items():
        around = _enclosing_functions(tree)
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            functions = around[call]
            where = f"{path}:{call.lineno}: {ast.unparse(call)[:70]}"
            if call.func.attr == "op" and not (functions and functions[0].name in WRITERS):
                problems.append(f"{where} writes an op, not through emit or emit_multi")
            if call.func.attr not in WRITERS:
                continue
            op = call.args[0] if call.args else None
            factory = next((f for f in functions if isinstance(op, ast.Name) and op.id in [a.arg for a in f.args.args]), None)
            if _is_literal(op):
                names.add(op.value)
            elif factory is not None:
                factories[factory.name] = [a.arg for a in factory.args.args].index(op.id)
            else:
                problems.append(f"{where} names its op neither by a literal nor by a parameter of a function around it")
    for path, tree in trees.items():
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
            if call.func.id in factories:
                index = factories[call.func.id]
                if index < len(call.args) and _is_literal(call.args[index]):
                    names.add(call.args[index].value)
                else:
                    problems.append(f"{path}:{call.lineno}: {ast.unparse(call)[:70]} passes its op name not as a literal")
    return names, problems


def ops_handlers_can_write() -> set[str]:
    """The op names the handlers and the extern fallback can write, read from their code."""
    names, problems = scan(SOURCES)
    assert not problems, "\n".join(problems)
    return names


def test_every_op_a_handler_can_write_is_a_forward_op_of_memplan():
    table = ir_op_table()
    written = ops_handlers_can_write()
    assert not written - set(table), f"not in docs/IR.md's op table: {sorted(written - set(table))}"
    assert {op: table[op] for op in written if table[op] != "forward"} == {}
    # Sanity of the scan: the factories' ops (unary, reduce) and the fallback's are found.
    assert {"relu", "rsqrt", "sum", "mean", "extern", "extern_view", "attention"} <= written


def test_the_scan_finds_every_op_the_committed_exports_use():
    used = set()
    for step in COMMITTED.glob("*.step"):
        used |= set(re.findall(r" = ([a-z_0-9]+)\(", step.read_text()))
    assert used and used <= ops_handlers_can_write(), sorted(used - ops_handlers_can_write())


def test_the_scan_refuses_op_names_it_cannot_read(tmp_path):
    handler = tmp_path / "unreadable.py"
    handler.write_text(textwrap.dedent("""
        NAMES = {"a": "relu"}

        def looked_up(t, x):
            return t.emit(NAMES["a"], [x])

        def by_variable(t, x):
            op = "relu"
            return t.emit(op, [x])

        def past_emit(t, x):
            return t.w.op(["y"], ["f32[]"], "relu", [x.name], [], None)

        def factory(op):
            return lambda t, x: t.emit(op, [x])

        chosen = factory(NAMES["a"])
        fine = factory("relu")
    """))
    names, problems = scan([handler])
    assert [int(line.split(":")[1]) for line in problems] == [5, 9, 12, 17], problems
    assert names == {"relu"}


def test_handlers_are_keyed_by_aten_overload_objects():
    import torch

    assert HANDLERS and all(isinstance(overload, torch._ops.OpOverload) for overload in HANDLERS)
    assert HANDLERS[torch.ops.aten.linear.default].__name__ == "linear"
    assert aten.linear.default is torch.ops.aten.linear.default


def _unregistered(t, x):
    return x


def test_registering_an_overload_torch_does_not_have_fails_naming_it_and_the_handler():
    with pytest.raises(RegistrationError, match=r"handler test_ops\._unregistered registers aten\.lineer\.default, which torch \S+ does not have"):
        handles(aten.lineer.default)(_unregistered)
    with pytest.raises(RegistrationError, match=r"_unregistered registers aten\.linear\.defualt, which torch"):
        handles(aten.erfinv.default, aten.linear.defualt)(_unregistered)
    with pytest.raises(RegistrationError, match=r"_unregistered registers aten\.linear, which is not one ATen overload"):
        handles(aten.linear)(_unregistered)
    with pytest.raises(RegistrationError, match="registers 'aten.erfinv.default', which is not one ATen overload"):
        handles("aten.erfinv.default")(_unregistered)
    assert aten.erfinv.default not in HANDLERS, "a rejected registration registers none of its overloads"


def test_registering_an_overload_twice_fails_naming_both_handlers():
    relu = HANDLERS[aten.relu.default]
    with pytest.raises(RegistrationError, match=r"_unregistered registers aten\.relu\.default, which handler memplan_torch\.ops\.elementwise\.unary\('relu'\) handles already"):
        handles(aten.relu.default)(_unregistered)
    assert HANDLERS[aten.relu.default] is relu
    with pytest.raises(RegistrationError, match=r"_unregistered registers aten\.erfinv\.default twice"):
        handles(aten.erfinv.default, aten.erfinv.default)(_unregistered)
    assert aten.erfinv.default not in HANDLERS


def test_a_misspelt_registration_stops_its_module_importing(tmp_path):
    family = tmp_path / "misspelt_family.py"
    family.write_text(textwrap.dedent("""
        from memplan_torch.ops.registry import aten, handles

        @handles(aten.lineer.default)
        def linear(t, x, w, b=None):
            return x
    """))
    spec = importlib.util.spec_from_file_location("misspelt_family", family)
    with pytest.raises(RegistrationError, match=r"handler misspelt_family\.linear registers aten\.lineer\.default"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
