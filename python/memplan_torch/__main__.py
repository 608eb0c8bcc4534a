"""`python -m memplan_torch`: the command line.

    python -m memplan_torch export FILE.py:FUNC -o OUT.step [--batch N] [--optimizer sgd|momentum|adam|adamw]
        [--lr F] [--weight-decay F] [--momentum F] [--amp bf16|f16] [--weights OUT.safetensors]
        [--user-checkpoint keep|drop]
    python -m memplan_torch fit FILE.py:FUNC --memory 80GiB [--budget B] [--memplan PATH]
    python -m memplan_torch predict FILE.py:FUNC [--batch N] [--amp bf16] [--optimizer ...] [--device cuda|cpu]
        [--expandable-segments] [--format json] [--trace OUT.trace]
    python -m memplan_torch checkpoint FILE.py:FUNC --memory 24GiB [--batch N] [--amp bf16] [--by reserved|allocated]

`FUNC()` returns `(model, example_inputs)` (`FUNC(batch=N)` with `--batch N`, and for
`fit`); `model(*example_inputs)` returns the scalar training loss. `export` calls it under `virtual()` (no weight memory) unless `--weights`
asks for the initial parameters, which then need real tensors. `fit` calls `FUNC(batch=N)`
for growing N, exports and plans each (planning, not running) and prints batch -> arena.

Exit status as memplan's: 0 success, 1 bad input (an unreadable file, an op memplan
cannot express, an output that exists, a flag misused), 2 nothing fits the memory given.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import traceback
import warnings
from pathlib import Path

from . import safetensors
from .export import OPTIMIZERS, TORCH_DETAILS, export_step, step_arguments, virtual
from .step import ExportError, ExportWarning

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# torch's names of the autocast dtypes, beside memplan's.
_AMP = {"bf16": "bf16", "bfloat16": "bf16", "f16": "f16", "float16": "f16", "half": "f16"}


class Failure(Exception):
    """A message for stderr and an exit status."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def format_bytes(n: int) -> str:
    """`3512576 B (3.35 MiB)`, as memplan's reports write sizes."""
    if n < 1024:
        return f"{n} B"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} B ({value:.2f} {unit})"


def parse_size(text: str) -> int:
    """Bytes from `80GiB`, `24gb`, `800 MB`, `1048576B`: a number and a unit, the unit in
    any case (`gb` is GB, 10^9; `gib` is GiB, 2^30). A number without a unit is refused: `24`
    is more likely 24 GiB meant than 24 bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if match is None:
        raise Failure(f"`{text}`: expected a size like 80GiB, 24GB or 512MiB")
    number, unit = match.groups()
    if not unit:
        raise Failure(f"`{text}` has no unit: say 24GiB (2^30 bytes), 24GB (10^9) or {text}B (bytes)")
    by_lower = {name.lower(): name for name in _UNITS}
    if unit.lower() not in by_lower:
        raise Failure(f"`{text}`: unknown unit `{unit}` (units: {', '.join(_UNITS)}, in any case)")
    value = float(number)
    if value <= 0:
        raise Failure(f"`{text}`: expected a positive size")
    return int(value * _UNITS[by_lower[unit.lower()]])


def load_function(spec: str):
    """`FILE.py:FUNC` -> the function (the file's directory goes on sys.path first, so the
    file can import its neighbours)."""
    if ":" not in spec:
        raise Failure(f"`{spec}`: expected FILE.py:FUNC")
    file, func = spec.rsplit(":", 1)
    path = Path(file)
    if not path.is_file():
        raise Failure(f"{file}: no such file")
    sys.path.insert(0, str(path.resolve().parent))
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[path.stem] = module
    module_spec.loader.exec_module(module)
    if not hasattr(module, func):
        raise Failure(f"{file} defines no `{func}`")
    return getattr(module, func)


def _model_and_inputs(result, spec: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Failure(f"{spec} must return (model, example_inputs)")
    model, inputs = result
    return model, tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


def _write_new(path: str, text: str) -> None:
    try:
        with open(path, "x") as f:
            f.write(text)
    except FileExistsError:
        raise Failure(f"{path} exists; memplan never overwrites a file") from None


def _new_file(path: str | None) -> None:
    """Refuses, before any work, an output that exists or whose directory does not."""
    if path is None:
        return
    if os.path.exists(path):
        raise Failure(f"{path} exists; memplan never overwrites a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise Failure(f"{path}: the directory {os.path.dirname(path) or folder} does not exist")


def _call(func, spec: str, batch: int | None):
    """FUNC() or FUNC(batch=N), refusing a FUNC that takes no `batch` when one is asked."""
    if batch is None:
        return func()
    try:
        inspect.signature(func).bind(batch=batch)
    except TypeError:
        raise Failure(f"{spec} takes no `batch` argument: write `def {spec.rsplit(':', 1)[-1]}(batch=8):` "
                      "and build the example inputs with that batch size") from None
    except ValueError:
        pass  # a callable whose signature Python cannot read: just call it
    return func(batch=batch)


def cmd_export(args) -> None:
    _new_file(args.output)
    _new_file(args.weights)
    if args.batch is not None and args.batch < 1:
        raise Failure(f"--batch {args.batch}: expected a positive batch size")
    func = load_function(args.function)
    if args.weights:
        model, inputs = _model_and_inputs(_call(func, args.function, args.batch), args.function)
    else:
        with virtual():
            model, inputs = _model_and_inputs(_call(func, args.function, args.batch), args.function)
    text = export_step(model, inputs, optimizer=args.optimizer, lr=args.lr, weight_decay=args.weight_decay,
                       momentum=args.momentum, amp=args.amp, name=args.name or Path(args.output).stem,
                       user_checkpoint=args.user_checkpoint)
    _write_new(args.output, text)
    print(f"wrote {args.output}")
    regions = len(set(re.findall(r"\) checkpoint\((\d+)\)", text)))
    if regions:
        calls = "1 torch.utils.checkpoint call" if regions == 1 else f"{regions} torch.utils.checkpoint calls"
        print(f"note: {calls} kept: memplan recomputes them in the backward as PyTorch does "
              "(--user-checkpoint drop lets memplan decide)", file=sys.stderr)
    externs = extern_ops(text)
    if externs:
        listed = ", ".join(f"{target} ({n}x)" for target, n in externs.items())
        print(f"note: written as extern (planned, but `memplan run` cannot execute them): {listed}", file=sys.stderr)
    if args.weights:
        try:
            safetensors.write_new(args.weights, step_arguments(model, inputs, args.amp))
        except FileExistsError:
            raise Failure(f"{args.weights} exists; memplan never overwrites a file") from None
        print(f"wrote {args.weights}")
    if not args.no_predict:
        _export_summary(func, args, text)


def _export_summary(func, args, text: str) -> None:
    """export's summary: memplan's arena for the step beside PyTorch eager's predicted
    memory for it on a CUDA device (`predict`'s figures). Skipped, with a note, when the
    memplan binary is not found or PyTorch cannot run the step on fake tensors."""
    import types

    try:
        memplan = find_memplan(getattr(args, "memplan", None))
        arena = plan_arena(memplan, text, None)
        settings = types.SimpleNamespace(optimizer=args.optimizer, amp=args.amp, device="cuda", expandable_segments=False,
                                         lr=args.lr, weight_decay=args.weight_decay, user_checkpoint=args.user_checkpoint)
        eager = predict_step(func, args.function, args.batch, settings, memplan, arena=False)["eager"]
    except Failure as e:
        print(f"note: no summary: {e}", file=sys.stderr)
        return
    print(f"memplan arena {format_bytes(arena)}; PyTorch eager on a CUDA device, predicted: "
          f"max_memory_allocated {format_bytes(eager['max_memory_allocated'])}, "
          f"max_memory_reserved {format_bytes(eager['max_memory_reserved'])} (python -m memplan_torch predict says more)")


def extern_ops(text: str) -> dict[str, int]:
    """The forward `extern` and `extern_view` ops of a step's text by target, with counts,
    in order of first appearance."""
    counts: dict[str, int] = {}
    for target in _EXTERN.findall(text):
        counts[target] = counts.get(target, 0) + 1
    return counts


_EXTERN = re.compile(r'= extern(?:_view)?\(.*?target="((?:[^"\\]|\\.)*)"')


def find_memplan(given: str | None) -> str:
    """--memplan, else $MEMPLAN, else the memplan installed with this package (beside this
    Python: found with its virtual environment not activated), else memplan on PATH."""
    path = given or os.environ.get("MEMPLAN") or _installed_memplan() or shutil.which("memplan")
    if not path:
        raise Failure("cannot find the memplan binary: `pip install ./python` installs it with this package; or give --memplan PATH "
                      "or set MEMPLAN (cargo build --release builds target/release/memplan)")
    return path


def _installed_memplan() -> str | None:
    """The `memplan` that `pip install` put in this Python's scripts directory (a virtual
    environment's bin/, beside its python), if there is one."""
    name = "memplan.exe" if os.name == "nt" else "memplan"
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def plan_arena(memplan: str, step_text: str, budget: str | None) -> int:
    """The planned arena of a step, in bytes (memplan plan --format json); -1 when the
    budget cannot be met."""
    return plan_figures(memplan, step_text, budget)["arena"]


def plan_figures(memplan: str, step_text: str, budget: str | None) -> dict:
    """`arena` (bytes; -1 when the budget cannot be met) and, under a budget, the
    recomputation's `extra_flops` and `overhead_percent`, from memplan plan --format json."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "step.step")
        with open(path, "w") as f:
            f.write(step_text)
        command = [memplan, "plan", path, "--format", "json"] + (["--budget", budget] if budget else [])
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except OSError as e:
            raise Failure(f"cannot run memplan ({memplan}): {e.strerror}; build it with `cargo build --release` "
                          "or name it with --memplan") from None
    if done.returncode == 2:
        return {"arena": -1}  # the budget cannot be met at this batch
    if done.returncode != 0:
        raise Failure(f"memplan plan failed ({done.returncode}):\n{done.stderr}")
    report = json.loads(done.stdout)
    remat = report.get("remat") or {}
    return {"arena": int(report["arena_bytes"]), "extra_flops": remat.get("extra_flops", 0), "overhead_percent": remat.get("overhead_percent", 0.0)}


def _largest(fits, cap: int) -> tuple[int, bool]:
    """The largest batch in 1..cap for which `fits` holds (taken to be monotone: doubling,
    then bisection), and whether that is the cap (larger batches untried)."""
    if not fits(1):
        return 0, False
    low, high, batch = 1, None, 2
    while batch <= cap:
        if not fits(batch):
            high = batch
            break
        low, batch = batch, batch * 2
    if high is None:
        if low == cap or fits(cap):
            return cap, True
        high = cap
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low, False


def cmd_fit(args) -> None:
    memory = parse_size(args.memory)
    memplan = find_memplan(args.memplan)
    func = load_function(args.function)
    if args.max_batch < 1:
        raise Failure(f"--max-batch {args.max_batch}: expected a positive batch size")
    plans: dict[int, dict] = {}
    eager: dict[int, dict] = {}

    def plan_at(batch: int) -> dict:
        if batch not in plans:
            with virtual():
                model, inputs = _model_and_inputs(_call(func, args.function, batch), args.function)
            text = export_step(model, inputs, optimizer=args.optimizer, lr=args.lr, weight_decay=args.weight_decay,
                               amp=args.amp, name="fit", user_checkpoint=args.user_checkpoint)
            figures = plan_figures(memplan, text, args.budget)
            if figures["arena"] < 0:
                # The budget is below what recomputation reaches at this batch: the plan
                # without it is what memplan would run.
                figures = {**plan_figures(memplan, text, None), "budget_not_met": True}
            plans[batch] = figures
        return plans[batch]

    def eager_at(batch: int) -> dict:
        if batch not in eager:
            eager[batch] = predict_step(func, args.function, batch, args, memplan, arena=False)["eager"]
        return eager[batch]

    checkpointed: dict[int, dict] = {}
    blocks: list[str] = []
    if not args.no_eager:
        from .checkpointing import candidates

        with virtual():
            model, _ = _model_and_inputs(_call(func, args.function, 1), args.function)
        found = candidates(model)
        blocks = found[0] if found else []

    def checkpointed_at(batch: int) -> dict:
        """PyTorch eager with every repeated block in torch.utils.checkpoint: the most
        `checkpoint` advises."""
        from .checkpointing import apply_checkpointing
        from .predict import record, replay

        if batch not in checkpointed:
            with virtual():
                model, inputs = _model_and_inputs(_call(func, args.function, batch), args.function)
            apply_checkpointing(model, blocks)
            figures = replay(record(model, inputs, optimizer=args.optimizer, amp=args.amp, device=args.device), memplan,
                             expandable_segments=args.expandable_segments)
            checkpointed[batch] = figures["max_memory_reserved"] if args.device == "cuda" else figures["max_requested"]
        return checkpointed[batch]

    by_arena, arena_capped = _largest(lambda b: plan_at(b)["arena"] <= memory, args.max_batch)
    by_eager, eager_capped = (0, False) if args.no_eager else _largest(lambda b: eager_at(b)["max_memory_reserved"] <= memory, args.max_batch)
    by_checkpointed, checkpointed_capped = (0, False) if not blocks else _largest(lambda b: checkpointed_at(b) <= memory, args.max_batch)
    for batch in sorted(set(plans) | set(eager) | set(checkpointed)):
        if batch not in plans:
            plan_at(batch)
        if batch not in eager and not args.no_eager:
            eager_at(batch)
        if batch not in checkpointed and blocks:
            checkpointed_at(batch)
    cuda = args.device == "cuda"
    columns = [f"{'batch':>8}", f"{'memplan arena':>30}"]
    if args.budget:
        columns.append(f"{'extra FLOPs':>12}")
    if not args.no_eager:
        columns += [f"{'PyTorch eager allocated' if cuda else 'PyTorch eager peak':>30}"] + ([f"{'PyTorch eager reserved':>30}"] if cuda else [])
    if blocks:
        columns.append(f"{'eager, blocks checkpointed':>30}")
    print("  ".join(columns))
    for b in sorted(plans):
        figures = plans[b]
        arena = figures["arena"]
        row = [f"{b:>8}", f"{format_bytes(arena):>24}{' fits' if arena <= memory else '     '}"]
        if args.budget:
            row.append(f"{'not met':>12}" if figures.get("budget_not_met") else f"{figures.get('overhead_percent', 0.0):>+11.1f}%")
        if not args.no_eager:
            e = eager[b]
            row.append(f"{format_bytes(e['max_memory_allocated']):>30}")
            if cuda:
                row.append(f"{format_bytes(e['max_memory_reserved']):>24}{' fits' if e['max_memory_reserved'] <= memory else '     '}")
        if blocks:
            c = checkpointed[b]
            row.append(f"{format_bytes(c):>24}{' fits' if c <= memory else '     '}")
        print("  ".join(row))
    cap_note = f" (the --max-batch cap, {args.max_batch}: larger batches were not tried)"
    budget_note = f" under --budget {args.budget}" if args.budget else ""
    if by_arena:
        print(f"largest batch whose memplan arena{budget_note} fits in {args.memory}: {by_arena}"
              f"{cap_note if arena_capped else ''} (memplan run allocates exactly this arena)")
    if not args.no_eager:
        what = "predicted max_memory_reserved" if cuda else "predicted peak"
        if by_eager:
            print(f"largest batch PyTorch eager fits in {args.memory} ({what}, expandable_segments "
                  f"{'on' if args.expandable_segments else 'off'}): {by_eager}{cap_note if eager_capped else ''}")
        else:
            print(f"PyTorch eager fits no batch in {args.memory} ({what} at batch 1: {format_bytes(eager_at(1)['max_memory_reserved'])})")
    if blocks:
        shown = f"{blocks[0]} ... {blocks[-1]}" if len(blocks) > 2 else ", ".join(blocks)
        if by_checkpointed:
            print(f"largest batch PyTorch eager fits with its {len(blocks)} repeated blocks ({shown}) in torch.utils.checkpoint: "
                  f"{by_checkpointed}{cap_note if checkpointed_capped else ''} (`checkpoint --batch N --memory {args.memory}` "
                  "finds the cheapest checkpointing for a batch)")
        else:
            print(f"PyTorch eager fits no batch in {args.memory} even with its {len(blocks)} repeated blocks ({shown}) checkpointed")
    if not by_arena:
        raise Failure(f"no batch fits in {args.memory}: batch 1's memplan arena is {plans.get(1, {}).get('arena')} bytes", status=2)
    print(f"largest batch that fits in {args.memory}: {by_arena}")


def predict_step(func, spec: str, batch: int | None, args, memplan: str, arena: bool = True) -> dict:
    """PyTorch eager's predicted peaks for one steady-state step of FUNC's model (and
    memplan's arena for the same step, when `arena`): the `predict` command's JSON."""
    from .predict import CUBLAS_WORKSPACE, record, replay

    try:
        with virtual():
            model, inputs = _model_and_inputs(_call(func, spec, batch), spec)
    except Failure:
        raise
    except Exception as e:  # noqa: BLE001 - the user's FUNC failed: say where, not a page of traceback
        raise Failure(f"{_users_frame(e)}{spec} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    try:
        trace = record(model, inputs, optimizer=args.optimizer, amp=args.amp, device=args.device)
    except Exception as e:  # noqa: BLE001 - the user's model failed under PyTorch: say where
        frame = _users_frame(e)
        raise Failure(f"{frame}PyTorch could not run the step on fake tensors: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                      "\nhint: `predict` runs the model without data (shapes only); a step whose shapes depend on values cannot be predicted") from None
    figures = replay(trace, memplan, expandable_segments=args.expandable_segments)
    result = {
        "model": spec,
        "batch": batch,
        "device": args.device,
        "optimizer": args.optimizer,
        "amp": args.amp,
        "allocator": {"expandable_segments": args.expandable_segments},
        "eager": {
            "max_memory_allocated": figures["max_memory_allocated"],
            "max_memory_reserved": figures["max_memory_reserved"] if args.device == "cuda" else figures["max_requested"],
            "max_requested": figures["max_requested"],
        },
        "fixed": {"cublas_workspace": CUBLAS_WORKSPACE if args.device == "cuda" else 0},
        "ideal_arena": figures["ideal_arena"],
        "live_at_peak": figures["live_at_peak"],
        "trace": trace,
    }
    if args.device == "cpu":
        # The CPU allocator neither rounds nor caches: the peak is the bytes live.
        result["eager"]["max_memory_allocated"] = figures["max_requested"]
    if arena:
        with virtual():
            model, inputs = _model_and_inputs(_call(func, spec, batch), spec)
        text = export_step(model, inputs, optimizer=args.optimizer, lr=args.lr, weight_decay=args.weight_decay,
                           amp=args.amp, name="predict", user_checkpoint=args.user_checkpoint)
        result["memplan"] = {"arena": plan_arena(memplan, text, None)}
    return result


def _users_frame(exc: BaseException) -> str:
    """`file:line: ` of the innermost frame of the user's own code in a traceback."""
    from .datadep import is_users_file

    found = ""
    tb = exc.__traceback__
    while tb is not None:
        if is_users_file(tb.tb_frame.f_code.co_filename):
            found = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}: "
        tb = tb.tb_next
    return found


def cmd_predict(args) -> None:
    _new_file(args.trace)
    if args.batch is not None and args.batch < 1:
        raise Failure(f"--batch {args.batch}: expected a positive batch size")
    memplan = find_memplan(args.memplan)
    func = load_function(args.function)
    result = predict_step(func, args.function, args.batch, args, memplan, arena=not args.no_arena)
    trace = result.pop("trace")
    if args.trace:
        _write_new(args.trace, trace)
    if args.format == "json":
        result["live_at_peak"] = result["live_at_peak"][: args.top]
        print(json.dumps(result, indent=2))
        return
    eager = result["eager"]
    where = "a CUDA device" if args.device == "cuda" else "the CPU"
    amp = f", {args.amp} autocast" if args.amp else ""
    batch = f" at batch {args.batch}" if args.batch else ""
    print(f"PyTorch eager, one steady-state training step of {args.function}{batch} ({args.optimizer}{amp}) on {where}, predicted:")
    if args.device == "cuda":
        print(f"  torch.cuda.max_memory_allocated()  {format_bytes(eager['max_memory_allocated'])}")
        setting = "on" if args.expandable_segments else "off"
        print(f"  torch.cuda.max_memory_reserved()   {format_bytes(eager['max_memory_reserved'])}  (expandable_segments {setting})")
        print(f"  of which fixed: cuBLAS workspace {format_bytes(result['fixed']['cublas_workspace'])}; "
              "not counted by PyTorch: the CUDA context (about 0.5 GiB of device memory per process)")
    else:
        print(f"  peak of live tensor bytes          {format_bytes(eager['max_memory_allocated'])}")
    print(f"  the same allocations, placed by memplan: {format_bytes(result['ideal_arena'])}")
    if "memplan" in result:
        print(f"memplan's arena for the step (memplan plan; memplan run allocates exactly this): {format_bytes(result['memplan']['arena'])}")
    if args.top:
        print(f"largest tensors live at PyTorch's peak (of {len(result['live_at_peak'])}):")
        for block in result["live_at_peak"][: args.top]:
            print(f"  {format_bytes(block['block']):>26}  {block['label']}")
    if args.trace:
        print(f"wrote {args.trace} (memplan replay {args.trace} replays it)")


def cmd_checkpoint(args) -> None:
    from .checkpointing import advise
    from .predict import record, replay

    memory = parse_size(args.memory)
    if args.batch is not None and args.batch < 1:
        raise Failure(f"--batch {args.batch}: expected a positive batch size")
    memplan = find_memplan(args.memplan)
    func = load_function(args.function)
    metric = "max_memory_reserved" if args.by == "reserved" else "max_memory_allocated"

    def build():
        try:
            with virtual():
                return _model_and_inputs(_call(func, args.function, args.batch), args.function)
        except Failure:
            raise
        except Exception as e:  # noqa: BLE001 - the user's FUNC failed: say where
            raise Failure(f"{_users_frame(e)}{args.function} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None

    def predict(model, inputs):
        trace = record(model, inputs, optimizer=args.optimizer, amp=args.amp, device=args.device)
        figures = replay(trace, memplan, expandable_segments=args.expandable_segments)
        allocated = figures["max_memory_allocated"] if args.device == "cuda" else figures["max_requested"]
        reserved = figures["max_memory_reserved"] if args.device == "cuda" else figures["max_requested"]
        return {"max_memory_allocated": allocated, "max_memory_reserved": reserved}

    best, tried = advise(build, memory, predict, optimizer=args.optimizer, amp=args.amp, metric=metric)
    base = tried[0]
    extra = lambda plan: (plan.flops - base.flops) / base.flops * 100 if base.flops else 0.0
    if args.format == "json":
        plans = [{"modules": p.names, "selective": p.selective, "eager": p.eager, "flops": p.flops, "extra_flops_percent": extra(p)} for p in tried]
        print(json.dumps({"target": memory, "by": metric, "advice": plans[tried.index(best)] if best else None, "tried": plans}, indent=2))
    else:
        where = "a CUDA device" if args.device == "cuda" else "the CPU"
        print(f"PyTorch eager on {where}, {args.function}{f' at batch {args.batch}' if args.batch else ''}, target {args.memory} ({metric}):")
        for plan in tried:
            fits = "fits" if plan.eager[metric] <= memory else "does not fit"
            print(f"  {plan.describe()}: allocated {format_bytes(plan.eager['max_memory_allocated'])}, "
                  f"reserved {format_bytes(plan.eager['max_memory_reserved'])}, extra FLOPs {extra(plan):+.1f}%: {fits}")
        if best is not None and best.names:
            names = ", ".join(repr(n) for n in best.names)
            print(f"advice: {best.describe()}")
            print(f"  predicted {metric} {format_bytes(best.eager[metric])} (target {format_bytes(memory)}), "
                  f"extra FLOPs {extra(best):+.1f}% of the step")
            print("  apply it in one call, after building the model:")
            print("    from memplan_torch import apply_checkpointing")
            print(f"    apply_checkpointing(model, [{names}]{', selective=True' if best.selective else ''})")
        elif best is not None:
            print("advice: the step fits without checkpointing")
    if best is None:
        raise Failure(f"no checkpointing of {args.function}'s repeated blocks brings PyTorch eager's {metric} to {args.memory}; "
                      f"the least tried is {format_bytes(min(p.eager[metric] for p in tried))}", status=2)


def _amp(text: str) -> str:
    """`--amp`'s dtype, memplan's or torch's name."""
    if text.lower() not in _AMP:
        raise argparse.ArgumentTypeError(f"{text!r}: expected bf16 or f16 (or torch's bfloat16, float16, half)")
    return _AMP[text.lower()]


class _Parser(argparse.ArgumentParser):
    """argparse, with a misused flag an error of bad input (exit 1, as memplan's), not 2
    (which says nothing fits)."""

    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(1)


def main(argv=None) -> int:
    parser = _Parser(prog="python -m memplan_torch", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def optimizer_flags(p):
        p.add_argument("--optimizer", choices=list(OPTIMIZERS), default="adamw", help="the optimizer (default adamw, as torch.optim.AdamW)")
        p.add_argument("--lr", type=float, help="learning rate (default: PyTorch's, 0.001)")
        p.add_argument("--weight-decay", type=float, help="weight decay (adamw; default 0.01)")
        p.add_argument("--amp", type=_amp, metavar="bf16|f16", help="export the forward under autocast to this dtype "
                       "(torch's names too: bfloat16, float16, half)")
        p.add_argument("--user-checkpoint", choices=["keep", "drop"], default="keep",
                       help="torch.utils.checkpoint calls: keep (default; memplan recomputes what PyTorch recomputes) "
                            "or drop (planned without them; --budget chooses what to recompute)")

    export = commands.add_parser("export", help="write the training step of FUNC()'s model as a .step file")
    export.add_argument("function", metavar="FILE.py:FUNC")
    export.add_argument("-o", "--output", required=True, metavar="OUT.step", help="the new .step file (never overwritten)")
    export.add_argument("--batch", type=int, metavar="N", help="call FUNC(batch=N) (default: FUNC())")
    optimizer_flags(export)
    export.add_argument("--momentum", type=float, help="momentum (the momentum optimizer; default 0.9)")
    export.add_argument("--weights", metavar="OUT.safetensors", help="also write the initial parameters and inputs, named as in the step")
    export.add_argument("--name", help="the step's name (default: the output file's stem)")
    export.add_argument("--no-predict", action="store_true",
                        help="skip the summary (memplan's arena, PyTorch eager's predicted memory), which needs the memplan binary")
    export.add_argument("--memplan", help="the memplan binary for the summary (default: $MEMPLAN, the installed one, then PATH)")

    fit = commands.add_parser("fit", help="the largest batch whose planned arena fits in --memory")
    fit.add_argument("function", metavar="FILE.py:FUNC", help="FUNC(batch=N) returns (model, example_inputs)")
    fit.add_argument("--memory", required=True, help="the memory to fit in, with a unit in any case: 80GiB, 24gb, 800MB")
    fit.add_argument("--budget", help="plan with memplan's --budget (recompute to fit): a size or a fraction like 0.8x")
    fit.add_argument("--memplan", help="the memplan binary (default: $MEMPLAN, then the one installed with this package, then memplan on PATH)")
    fit.add_argument("--max-batch", type=int, default=1 << 16, help="the largest batch tried (default 65536)")
    fit.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="the device PyTorch eager's memory is predicted for")
    fit.add_argument("--expandable-segments", action="store_true", help="PyTorch's allocator with expandable_segments:True")
    fit.add_argument("--no-eager", action="store_true", help="plan only: skip predicting PyTorch eager's memory")
    optimizer_flags(fit)

    predict = commands.add_parser("predict", help="PyTorch eager's own max_memory_allocated/reserved for one training step, before running it")
    predict.add_argument("function", metavar="FILE.py:FUNC")
    predict.add_argument("--batch", type=int, metavar="N", help="call FUNC(batch=N) (default: FUNC())")
    optimizer_flags(predict)
    predict.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                         help="the step as PyTorch runs it on a CUDA device (default) or on the CPU")
    predict.add_argument("--expandable-segments", action="store_true",
                         help="as with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    predict.add_argument("--format", choices=["text", "json"], default="text")
    predict.add_argument("--top", type=int, default=10, metavar="N", help="how many tensors live at the peak to list (default 10)")
    predict.add_argument("--trace", metavar="OUT.trace", help="also write the allocation trace (memplan replay reads it)")
    predict.add_argument("--no-arena", action="store_true", help="skip exporting and planning the step for memplan's arena")
    predict.add_argument("--memplan", help="the memplan binary (default: $MEMPLAN, then the one installed with this package, then memplan on PATH)")

    advice = commands.add_parser("checkpoint", help="which modules to wrap in torch.utils.checkpoint for PyTorch eager to fit --memory")
    advice.add_argument("function", metavar="FILE.py:FUNC")
    advice.add_argument("--memory", required=True, help="the memory PyTorch eager must fit in, with a unit: 24GiB, 80gb")
    advice.add_argument("--batch", type=int, metavar="N", help="call FUNC(batch=N) (default: FUNC())")
    advice.add_argument("--by", choices=["reserved", "allocated"], default="reserved",
                        help="what must fit: max_memory_reserved (default: what the process needs) or max_memory_allocated")
    advice.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    advice.add_argument("--expandable-segments", action="store_true", help="as with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    advice.add_argument("--format", choices=["text", "json"], default="text")
    advice.add_argument("--memplan", help="the memplan binary (default: $MEMPLAN, then the one installed with this package, then memplan on PATH)")
    optimizer_flags(advice)

    args = parser.parse_args(argv)
    # The exporter's warnings as one line each, `warning: ...` (not Python's file:line form).
    show = warnings.showwarning

    def showwarning(message, category, *rest, **kwargs):
        if issubclass(category, ExportWarning):
            print(f"warning: {message}", file=sys.stderr)
        else:
            show(message, category, *rest, **kwargs)

    warnings.showwarning = showwarning
    try:
        {"export": cmd_export, "fit": cmd_fit, "predict": cmd_predict, "checkpoint": cmd_checkpoint}[args.command](args)
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, as memplan does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except Failure as e:
        print(f"error: {e}", file=sys.stderr)
        return e.status
    except ExportError as e:
        if os.environ.get(TORCH_DETAILS) and e.__cause__ is not None:
            # What torch raised, as it raised it, before memplan's one screen.
            traceback.print_exception(e.__cause__)
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
