"""The command lines and reports of examples/, benchmarks/ and tools/, and their layout.

Cheap checks only: option parsing runs the programs as subprocesses
(``python -m <package>.<name>`` from the repository root, before any
training), the reports are checked on fake numbers, and nothing here needs
scikit-learn, matplotlib, PyTorch or PaddlePaddle (what would is skipped).
The layout: every program answers --help, none edits sys.path, and the
packages import each other without a cycle.
"""
import ast
import glob
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("examples", "benchmarks", "tools")


def run_module(module, *args, timeout=120):
    """Runs ``python -m module args...`` from the repository root; the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def run_shell(path, *args, timeout=120):
    """Runs ``bash path args...`` (path relative to the repository root) from the root."""
    return subprocess.run(["bash", os.path.join(ROOT, path), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def module(name):
    return importlib.import_module(name)


def runnable_modules():
    """``package.name`` of every program: the .py files at the top of each package."""
    return sorted(f"{package}.{os.path.basename(path)[:-3]}" for package in PACKAGES
                  for path in glob.glob(os.path.join(ROOT, package, "*.py"))
                  if os.path.basename(path) != "__init__.py")


def package_modules():
    """{module name: file} of every .py file under the packages, subpackages included."""
    found = {}
    for package in PACKAGES:
        for path in glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True):
            parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(name, path, known):
    """The modules of `known` that module `name` (file `path`) imports, anywhere in the file:
    each module named by an import statement and the packages it lies in."""
    tree = ast.parse(open(path).read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([node.module] if node.module else []))
            targets += [base] + [f"{base}.{alias.name}" for alias in node.names]
    found = set()
    for target in targets:
        parts = target.split(".")
        found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(known)
    return found - {name}


def find_cycle(graph):
    """One import cycle of `graph` ({module: set of modules}) as a list, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


# ---- the layout

# Programs whose --help answers in well under a second (measured); the others import MindSpore
# first, seconds each, and are in the slow tier.
QUICK_PROGRAMS = {"benchmarks.layouts", "benchmarks.bench_bnb_adam8bit", "tools.netlab",
                  "tools.check_reference_against_paddle"}


@pytest.mark.parametrize("name", [n if n in QUICK_PROGRAMS
                                  else pytest.param(n, marks=pytest.mark.slow)
                                  for n in runnable_modules()])
def test_every_program_answers_help(name):
    """Every program at the top of examples/, benchmarks/ and tools/ runs as a module and
    answers --help, also those whose optional dependencies (PyTorch, PaddlePaddle, ...) are
    not installed."""
    res = run_module(name, "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "usage" in res.stdout and f"python -m {name}" in res.stdout


def test_the_programs_are_found():
    names = runnable_modules()
    assert {"examples.train", "examples.train_dist", "benchmarks.bench_optimizers",
            "benchmarks.layouts", "tools.link_experiment", "tools.link_worker"} <= set(names)
    assert not any(".common" in n for n in names)


def test_library_modules_are_not_programs():
    """examples/common holds libraries: nothing there runs as a program."""
    for path in glob.glob(os.path.join(ROOT, "examples", "common", "*.py")):
        assert "__main__" not in open(path).read(), path


def test_no_sys_path_edits():
    """The packages import each other absolutely, from the repository root: no file of
    theirs touches sys.path."""
    offenders = []
    for package in PACKAGES:
        for path in glob.glob(os.path.join(ROOT, package, "**", "*"), recursive=True):
            if os.path.isfile(path) and "__pycache__" not in path:
                with open(path, errors="replace") as fh:
                    if "sys.path" in fh.read():
                        offenders.append(os.path.relpath(path, ROOT))
    assert not offenders


def test_no_import_cycle():
    known = package_modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    # the parse sees the imports (a vacuous graph would have no cycle either)
    assert "benchmarks.layouts" in graph["benchmarks.bench_optimizers"]
    assert "examples.common.digits" in graph["examples.train"]
    assert "tools.link_worker" in graph["tools.link_experiment"]
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_layouts_lists_each_layout():
    res = run_module("benchmarks.layouts", "--size", "1e6")
    assert res.returncode == 0, res.stderr
    rows = {line.split()[0]: line.split() for line in res.stdout.splitlines()[1:]}
    assert rows["resnet50"][1] == "161" and rows["equal4"][1:3] == ["4", "1,000,000"]
    res = run_module("benchmarks.layouts", "--size", "0")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    layouts = module("benchmarks.layouts")
    sizes, _ = layouts.resnet50_sizes(25_000_000)
    assert sum(sizes) == layouts.RESNET50_PARAMS and len(sizes) == layouts.RESNET50_TENSORS


def test_kernel_alone_runs_through_the_testing_helpers():
    """The DGC kernels alone, through ms_optim.testing (call_kernel, prepare_kernel)."""
    dgc = module("benchmarks.kernel_alone_dgc")
    sizes, _ = module("benchmarks.layouts").resnet50_sizes(100_000)
    assert dgc.dgc_kernel_alone(sizes, steps=2) > 0


def test_host_floor_probe_moves_each_stream_as_declared(tmp_path):
    """The bandwidth probe reads, updates and writes the streams it is given, and each
    kernel's floor counts the bytes its docstring states."""
    floor = module("benchmarks.host_floor")
    assert {k: floor.floor_bytes(k) for k in floor.FLOORS} == {
        "adam f32": 28, "adam bf16": 20, "adam int8": 16, "lion f32": 20, "lion bf16": 16,
        "lion int8": 14, "lamb": 40, "dgc select": 20, "dgc momentum": 20}
    probe = floor.build_probe(str(tmp_path))
    n = 16385
    run = floor.probe_call(probe, [[(4, floor.R), (4, floor.RW), (2, floor.RW), (4, floor.W)]],
                           n, 2)
    bufs = run.buffers[0]
    bufs[3][:] = 0.0
    run()
    np.testing.assert_array_equal(bufs[0], 1.0)  # read only
    np.testing.assert_array_equal(bufs[1][:n], 1.5)  # x * 0.5 + 1 on every element
    np.testing.assert_array_equal(bufs[1][n:], 1.0)
    np.testing.assert_array_equal(bufs[2][:(2 * n + 3) // 4], 1.5)  # 2 bytes an element
    np.testing.assert_array_equal(bufs[3][:n], 1.0)


@pytest.mark.slow
def test_host_floor_reports_kernels_against_their_floors(tmp_path):
    copy = _library_copy(tmp_path)
    res = run_module("benchmarks.host_floor", "--size", "200000", "--rounds", "2", "--only",
                     "adam f32", "lamb", "--gap-ms", "1", "--against", copy, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert any(line.startswith("adam f32 ") for line in lines)
    assert any(line.startswith("lamb ") for line in lines)
    assert any(line.startswith("lamb [against] ") for line in lines)
    assert "  lamb / probe adam f32 = " in res.stdout
    assert "  lamb / lamb [against] = " in res.stdout
    assert f"[against]: the kernels of {copy}" in res.stdout
    assert "1.00x the Adam-shaped pass" in res.stdout
    assert "1 ms idle before each call" in res.stdout


def test_host_floor_names_the_torch_step_a_python_cannot_run():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    floor = module("benchmarks.host_floor")
    compile(floor._TORCH_WORKER, "the torch worker", "exec")  # it parses
    for kind in ("adam", "lion"):
        with pytest.raises(RuntimeError, match=f"could not run the torch step '{kind}'"):
            floor.TorchStep(sys.executable, [16], 1, kind)


def test_other_lions_bench_reports_its_layout_and_decay_and_refuses_a_negative_decay():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    res = run_module("benchmarks.bench_other_lion", "--size", "4000", "--steps", "1",
                     "--layout", "equal4", "--weight-decay", "0", "--only", "torch.compile")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "4,000 float32 parameters in 4 tensors (4 equal tensors), weight decay 0" in res.stdout
    assert "torch.compile'd Lion" in res.stdout and "skipped" in res.stdout
    assert "lion-pytorch" not in res.stdout  # --only leaves it out
    res = run_module("benchmarks.bench_other_lion", "--weight-decay", "-1")
    assert res.returncode == 2 and "--weight-decay must be at least 0" in res.stderr


def test_host_floor_refuses_a_negative_gap():
    res = run_module("benchmarks.host_floor", "--gap-ms", "-1", timeout=120)
    assert res.returncode == 2
    assert "--gap-ms must be at least 0, got -1.0" in res.stderr
    assert "Traceback" not in res.stderr


def test_override_kernel_restores_the_real_entry():
    from ms_optim import _native, testing
    real = _native.aot_func("ms_optim_adam_inplace")
    with testing.override_kernel("ms_optim_adam_inplace", "/x/libshim.so:timed"):
        assert _native.aot_func("ms_optim_adam_inplace") == "/x/libshim.so:timed"
        assert _native.aot_func("ms_optim_lamb").endswith(":ms_optim_lamb")
    assert _native.aot_func("ms_optim_adam_inplace") == real
    with pytest.raises(ValueError):
        with testing.override_kernel("no_such_kernel", "/x/libshim.so:timed"):
            pass


def _library_copy(tmp_path):
    """A copy of the native library under another path: another build, as far as the
    process can tell."""
    import shutil
    from ms_optim import _native
    copy = str(tmp_path / "libms_optim_copy.so")
    shutil.copy(_native.library_path(), copy)
    return copy


def _adam_int8_steps(library=None):
    """Two steps of the int8 Adam kernel alone on fresh buffers (whole blocks and a
    partial one), with this build's kernel or, given `library`, that build's: the buffers."""
    import contextlib
    from ms_optim import aot, testing
    n = 4 * aot.q8_block() + 7
    rng = np.random.default_rng(0)
    bufs = dict(param=[rng.standard_normal(n, dtype=np.float32)],
                m=[np.zeros(n, np.int8)], v=[np.zeros(n, np.uint8)],
                grad=[rng.standard_normal(n, dtype=np.float32)],
                m_scale=[np.zeros(5, np.float32)], v_scale=[np.zeros(5, np.float32)],
                key=np.array([1, 0], np.int32), done=np.zeros(1, np.float32),
                lr=np.float32([1e-3]), wd=np.float32([0.1]),
                powers=aot.consts_array("powers", beta1_power=0.9, beta2_power=0.999),
                consts=aot.consts_array("adam", beta1=0.9, beta2=0.999, eps=1e-8,
                                        inv_scale=1.0, nesterov=False))
    entry = aot.host_step_entry("adam", False, True)
    with testing.kernels_from(library) if library else contextlib.nullcontext():
        run = testing.prepare_kernel(entry, **bufs)
    run()
    run()
    return bufs, _mapped_file(run)


def _mapped_file(run):
    """The file mapped where the ctypes function of prepared kernel `run` lies."""
    import ctypes
    fn, = [c.cell_contents for c in run.__closure__
           if isinstance(c.cell_contents, ctypes._CFuncPtr)]
    address = ctypes.cast(fn, ctypes.c_void_p).value
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[-1]
    return None


def test_kernels_from_runs_another_build_and_gives_the_entries_back(tmp_path):
    """testing.kernels_from: a copy of the library is loaded beside this one (its path in
    the process's mappings, where the prepared kernel's function lies), it steps the same
    bits, and a kernel prepared after the block is this build's again."""
    from ms_optim import _native
    copy = _library_copy(tmp_path)
    theirs, their_file = _adam_int8_steps(copy)
    assert their_file == os.path.realpath(copy)
    assert _native._ENTRY_LIBRARY is None
    mine, my_file = _adam_int8_steps()
    assert my_file == os.path.realpath(_native.library_path())
    for slot in ("param", "m", "v", "m_scale", "v_scale"):
        np.testing.assert_array_equal(mine[slot][0], theirs[slot][0], err_msg=slot)
    assert np.abs(mine["m"][0]).max() > 0  # the steps moved the moments


def test_kernels_from_takes_a_relative_path_and_reports_that_builds_errors(tmp_path,
                                                                             monkeypatch):
    """A path relative to the working directory loads; a kernel of the other build that
    refuses its tensors raises with that build's message, not this one's last."""
    from ms_optim import aot, testing
    copy = _library_copy(tmp_path)
    monkeypatch.chdir(tmp_path)
    bufs, _ = _adam_int8_steps(os.path.basename(copy))
    entry = aot.host_step_entry("adam", False, True)
    short = dict(bufs, m_scale=[np.zeros(4, np.float32)])  # 5 blocks need 5 scales
    mine = r"m_scale0 must have 5 element\(s\) \(one per 256\), got 4"
    with pytest.raises(RuntimeError, match=mine):
        testing.call_kernel(entry, **short)
    theirs = r"v_scale0 must have 5 element\(s\) \(one per 256\), got 3"
    with testing.kernels_from(os.path.basename(copy)):
        with pytest.raises(RuntimeError, match=theirs):
            testing.call_kernel(entry, **dict(bufs, v_scale=[np.zeros(3, np.float32)]))


def test_kernels_from_refuses_what_it_cannot_compare(tmp_path, monkeypatch):
    """A missing library, this package's own file, a build that lays out a kernel's
    constants otherwise, and one that declares a kernel's tensors otherwise."""
    from ms_optim import NativeLibraryError, _native, testing
    missing = str(tmp_path / "nothing.so")
    with pytest.raises(NativeLibraryError, match=re.escape(missing)):
        with testing.kernels_from(missing):
            pass
    with pytest.raises(ValueError, match="is this package's own native library"):
        with testing.kernels_from(_native.library_path()):
            pass
    assert _native._ENTRY_LIBRARY is None
    copy = _library_copy(tmp_path)
    real_layout = _native.consts_layout
    with monkeypatch.context() as patched:
        patched.setattr(_native, "consts_layout",
                        lambda name: real_layout(name)[::-1] if name == "lamb"
                        else real_layout(name))
        with pytest.raises(ValueError, match=r"libms_optim_copy\.so lays out the constants "
                                             r"of 'lamb' as \('beta1', "):
            with testing.kernels_from(copy):
                pass
    declared = _native.aot_signature("ms_optim_lamb")
    monkeypatch.setattr(_native, "aot_signature", lambda entry: declared + " extra")
    with pytest.raises(ValueError, match=r"libms_optim_copy\.so declares 'ms_optim_lamb' as "):
        with testing.kernels_from(copy):
            _native.prepare_aot("ms_optim_lamb", [])
    assert _native._ENTRY_LIBRARY is None


# ---- bench_optimizers: targets are labelled as targets, --check sets the exit status

def test_bench_judges_targets_and_labels_them():
    bench = module("benchmarks.bench_optimizers")
    assert bench.judge(2.4, 2.5) == "met"
    assert bench.judge(2.5, 2.5) == "met"
    assert bench.judge(2.6, 2.5) == "not met"
    assert bench.judge(None, 2.5) == "not met"  # a missing optimizer cannot meet it
    line = bench.target_line("not met", "a / b", 2.6, 2.5)
    assert "target a / b <= 2.5: not met" in line
    assert "FAIL" not in line and "PASS" not in line


def test_bench_print_targets_counts_unmet(capsys):
    bench = module("benchmarks.bench_optimizers")
    report = {"ratios": [
        {"layout": "equal4", "size": 1000, "numerator": "x", "denominator": "y",
         "ratio": 1.0, "bar": 2.5},
        {"layout": "equal4", "size": 1000, "numerator": "z", "denominator": "y",
         "ratio": 3.0, "bar": 2.5}], "bars": []}
    assert bench.print_targets(report, threads=2) == 1
    out = capsys.readouterr().out
    assert "x / y <= 2.5: met" in out and "z / y <= 2.5: not met" in out
    assert [b["verdict"] for b in report["bars"]] == ["met", "not met"]
    assert "FAIL" not in out


def test_bench_topk_targets(capsys):
    bench = module("benchmarks.bench_optimizers")
    report = {}
    timings = {"ms_optim native": 0.01, "ops.topk": 0.1, "numpy argpartition": 0.5}
    # native is 10x faster than ops.topk (target 20x: not met), 50x numpy (target 8x: met)
    assert bench.judge_topk(timings, report) == 1
    assert [b["verdict"] for b in report["topk"]["bars"]] == ["not met", "met"]
    assert "target native / ops.topk" in capsys.readouterr().out


def test_bench_exit_status_only_fails_with_check(capsys):
    bench = module("benchmarks.bench_optimizers")
    assert bench.exit_status(errors=0, unmet=3, check=False) == 0
    assert bench.exit_status(errors=0, unmet=3, check=True) == 1
    assert bench.exit_status(errors=0, unmet=0, check=True) == 0
    assert bench.exit_status(errors=1, unmet=0, check=False) == 1


# ---- usage errors

def test_msrun_train_help_and_dash_arguments():
    res = run_shell("examples/msrun_train.sh", "--help")
    assert res.returncode == 0 and res.stdout.startswith("usage:"), res.stderr
    assert "bash examples/msrun_train.sh" in res.stdout
    assert not os.path.exists(os.path.join(ROOT, "--help"))
    assert run_shell("examples/msrun_train.sh", "-h").returncode == 0
    res = run_shell("examples/msrun_train.sh", "--out")
    assert res.returncode == 2 and "must not start with '-'" in res.stderr
    assert not os.path.exists(os.path.join(ROOT, "--out"))
    assert run_shell("examples/msrun_train.sh", "a", "b").returncode == 2


def test_check_reference_without_paddle_says_how_to_get_it():
    if importlib.util.find_spec("paddle") is not None:
        pytest.skip("PaddlePaddle is installed here")
    res = run_module("tools.check_reference_against_paddle")
    assert res.returncode == 2
    assert "pip install paddlepaddle==3.3.1" in res.stderr
    assert "python -m tools.check_reference_against_paddle" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_profile_step_times_the_step_with_a_no_op_kernel():
    res = run_module("benchmarks.profile_step", "--size", "20000", "--steps", "2", "--layout",
                     "equal4", timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "layout: 4 equal tensors; 4 tensors" in res.stdout
    assert re.search(r"AdamOffload step with a no-op kernel \(all but the kernel\) +[0-9.]+ ms",
                     res.stdout), res.stdout
    for wait in ("0", "12"):
        # the wall time less the wait is never negative when the op waits the time the
        # benchmark sets (a second copy of the probe library would not: its wait stays 0)
        assert re.search(rf"one op busy-waiting {wait} ms: the call less the wait +[0-9.]+ ms\n"
                         r" +the same, the calling thread's CPU time less the wait +-?[0-9.]+ ms",
                         res.stdout), res.stdout
        assert re.search(rf"a Python loop of 3000 stores after a {wait} ms wait \(ctypes\) +"
                         r"[0-9.]+ ms", res.stdout), res.stdout
    calls = re.search(r"one call of that cell runs ([0-9]+) Python functions and ([0-9]+) "
                      r"built-in ones", res.stdout)
    assert calls and int(calls.group(1)) > 10, res.stdout  # Cell.__call__ and what it calls


def test_first_call_times_compile_and_the_first_steps():
    res = run_module("benchmarks.first_call", "--only", "ms_optim.DGCMomentum[warmup5, bucket]",
                     "--size", "50000")
    assert res.returncode == 0, res.stderr[-2000:]
    assert re.search(r"ms_optim.DGCMomentum\[warmup5, bucket\], ResNet-50 tensors .*: compile "
                     r"[0-9.]+ s, first call [0-9.]+ s, together [0-9.]+ s; second call [0-9.]+ s",
                     res.stdout), res.stdout


@pytest.mark.parametrize("name, bad", [
    ("benchmarks.first_call", ["--only", "ms_optim.DGCMomentum", "--size", "0.5"]),
    ("benchmarks.first_call", ["--only", "Adam"]),

    pytest.param("tools.fidelity", ["--charlm-steps", "0"], marks=pytest.mark.slow),
    pytest.param("benchmarks.profile_step", ["--size", "10"], marks=pytest.mark.slow),
    pytest.param("benchmarks.profile_step", ["--layout", "resnet"], marks=pytest.mark.slow),
    ("benchmarks.bench_bnb_adam8bit", ["--steps", "0"]),
    pytest.param("benchmarks.kernel_alone_dgc", ["--steps", "0"], marks=pytest.mark.slow),
    pytest.param("tools.q8_codebooks", ["--n", "1000"], marks=pytest.mark.slow),
    pytest.param("benchmarks.bench_optimizers", ["--sizes", "0.5"], marks=pytest.mark.slow),
])
def test_programs_refuse_bad_values(name, bad):
    res = run_module(name, *bad)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]


def test_fidelity_bars_hold_both_ways():
    """A held-out loss away from float32's in either direction is not fidelity; the sign test
    counts the (task, seed) pairs in which a dtype's loss is larger."""
    fid = module("tools.fidelity")
    metrics = {"charlm": {"float32": [2.0, 2.0], "bfloat16": [2.01, 2.0], "int8": [1.9, 1.92]},
               "diabetes": {"float32": [0.5, 0.5], "bfloat16": [0.5, 0.5],
                            "int8": [0.505, 0.51]}}
    s = fid.summarize(metrics, held_out=["diabetes"])
    charlm = s["tasks"]["charlm"]["vs_float32"]
    assert charlm["bfloat16"]["mean_percent"] == pytest.approx(0.25) and charlm["bfloat16"]["met"]
    assert not charlm["int8"]["met"]  # 4.5% lower is a different run, not a faithful one
    assert s["tasks"]["diabetes"]["held_out"] and not s["tasks"]["charlm"]["held_out"]
    int8 = s["sign_tests"]["all tasks run"]["int8"]
    assert (int8["worse"], int8["pairs"], int8["bar_worse_at_most"], int8["met"]) == (2, 4, 2, True)
    assert int8["p_two_sided"] == pytest.approx(1.0)
    assert s["sign_tests"]["development tasks"]["int8"]["worse"] == 0
    assert s["sign_tests"]["all tasks run"]["bfloat16"]["ties"] == 3
    assert fid.sign_test(0, 10) == pytest.approx(2 / 1024)


def test_q8_codebooks_models_the_library_rule():
    """The measurement's grid for ms_optim's code, rounded to nearest, stores what
    reference.q8_quantize stores, tiny v kept; below m's smallest code the library flushes
    to 0 where the grid rounds to the nearer of 0 and that code, so those are left out."""
    from ms_optim import reference
    q8 = module("tools.q8_codebooks")
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(8 * 256) * 10.0 ** (-6 * rng.random(8 * 256))).astype(np.float32)
    mgrid, vgrid = q8.CODES["E4M3 / E5M3"]
    for signed, grid in ((True, mgrid), (False, vgrid)):
        y = x if signed else np.abs(x)
        want = reference.q8_dequantize(*reference.q8_quantize(y, signed), signed)
        got = q8.quantize(y, grid, 256, keep_nonzero=not signed)
        scale = np.repeat(np.abs(y).reshape(-1, 256).max(axis=1), 256)
        above = np.abs(y) >= grid[1] * scale
        np.testing.assert_array_equal(got[above], want[above])
        assert above.mean() > 0.5 and (signed or np.array_equal(got, want))
    assert q8.tree(7).size == 128 and q8.tree(8).size == 256 and q8.tree(8)[-1] == 1


@pytest.mark.slow
def test_comm_volume_help_and_bad_sparsity():
    res = run_module("benchmarks.comm_volume", "--help")
    assert res.returncode == 0 and "--sparsity" in res.stdout
    res = run_module("benchmarks.comm_volume", "--sparsity", "1.5")
    assert res.returncode == 2 and "[0, 1)" in res.stderr


@pytest.mark.parametrize("name", ["examples.train", "examples.train_dist",
                                  "benchmarks.comm_volume", "benchmarks.layouts"])
def test_every_option_has_a_help_text(name):
    parser = module(name).build_parser()
    missing = [a.option_strings for a in parser._actions if not a.help]
    assert not missing, f"{name}: options without help: {missing}"


@pytest.mark.parametrize("args, message", [
    (["--epochs", "0"], "positive integer"),
    (["--epochs", "-3"], "positive integer"),
    (["--epochs", "two"], "not an integer"),
    (["--seed", "-1"], ">= 0"),
    (["--only", "no such optimizer"], "no optimizer name contains"),
])
def test_train_rejects_bad_options_with_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        module("examples.train").parse_args(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_train_bad_epochs_subprocess_has_no_traceback():
    res = run_module("examples.train", "--epochs", "0")
    assert res.returncode == 2, res.stderr
    assert "must be a positive integer" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("args", [["--epochs", "0"], ["--batch", "-1"], ["--lr", "0"],
                                  ["--seed", "-2"], [], ["--opt", "dgc", "--report", "x"]])
def test_train_dist_rejects_bad_options(args):
    with pytest.raises(SystemExit) as exc:
        module("examples.train_dist").parse_args(args)
    assert exc.value.code == 2


# ---- the main job's output

def fake_result(name, accs, batch=32):
    train = module("examples.train")
    spec = next(s for s in train.OPTIMIZERS if s.name == name)
    return {"name": name, "batch_size": batch, "epochs": len(accs),
            "final_test_acc": accs[-1], "best_test_acc": max(accs), "train_time_s": 1.0,
            "history": {"test_acc": accs, "train_loss": [1.0] * len(accs),
                        "elapsed_s": [1.0] * len(accs)},
            "hyperparameters": train.hyperparameters(spec, len(accs))}


def test_train_epoch_line_labels_both_times():
    line = module("examples.train").epoch_line("Lamb", 3, 20, 0.5, 0.97, 0.4, 12.3)
    assert "epoch   0.4s" in line and "elapsed   12.3s" in line


def test_train_table_names_the_baseline():
    train = module("examples.train")
    table = train.format_table([fake_result("Momentum (baseline)", [0.97, 0.98]),
                                fake_result("Lamb", [0.96, 0.975])])
    header = table.splitlines()[0]
    assert "vs baseline Momentum (points)" in header and "vs first" not in header
    assert "-0.50" in table.splitlines()[3]


def test_train_results_record_hyperparameters():
    train = module("examples.train")
    by_name = {s.name: s for s in train.OPTIMIZERS}
    hp = json.loads(json.dumps(train.hyperparameters(by_name["Lamb (batch 256)"], 7)))
    assert hp["batch_size"] == 256 and hp["epochs"] == 7
    assert hp["optimizer"] == "ms_optim.lamb.Lamb"
    assert hp["lr"] == {"schedule": "WarmupLinearDecay", "peak": 0.03, "warmup_steps": 10,
                        "total_steps": 100}
    assert hp["settings"]["exclude_from_weight_decay_fn"] == "is_bias"
    assert hp["settings"]["lamb_weight_decay"] == 0.01  # a default, recorded too
    dgc = train.hyperparameters(by_name["DGCMomentum"], 20)
    assert dgc["lr"] == 0.05 and dgc["settings"]["sparsity"][-1] == 0.999


def test_train_zoomed_accuracy_range_spans_the_final_differences():
    train = module("examples.train")
    results = [fake_result("Momentum (baseline)", [0.6, 0.9, 0.975, 0.978]),
               fake_result("Lamb", [0.5, 0.95, 0.97, 0.972])]
    low, high = train.zoom_range(results)
    assert 0.96 <= low < 0.97 and 0.978 < high <= 0.99


@pytest.mark.slow
def test_train_plot_has_a_zoomed_panel(tmp_path):
    pytest.importorskip("matplotlib")
    train = module("examples.train")
    path = tmp_path / "curves.png"
    train.plot_curves([fake_result("Momentum (baseline)", [0.6, 0.9, 0.975, 0.978])], str(path))
    assert path.stat().st_size > 0


def test_link_reach_counts_steps_time_and_speedups():
    """The link experiment's summary of how a run reaches an accuracy: the first eval at or
    above it, its steps over the dense float32 run's, its time against each baseline's."""
    exp = module("tools.link_experiment")
    evals = lambda *rows: [{"step": s, "train_time_s": t, "test_acc": a} for s, t, a in rows]
    dense = evals((0, 0.0, 0.1), (10, 15.0, 0.92), (20, 30.0, 0.95))
    fp16 = evals((0, 0.0, 0.1), (10, 10.0, 0.92), (20, 20.0, 0.95))
    dgc = evals((0, 0.0, 0.1), (10, 1.0, 0.90), (20, 2.0, 0.93), (30, 3.0, 0.96))
    r = exp.reach(dgc, 0.95, {"dense": dense, "dense-fp16": fp16})
    assert (r["steps"], r["time_s"], r["steps_over_dense"]) == (30, 3.0, 1.5)
    assert r["speedup"] == {"dense": 10.0, "dense-fp16": pytest.approx(20.0 / 3.0)}
    never = exp.reach(dgc, 0.99, {"dense": dense})
    assert never["steps"] is None and never["speedup"] == {"dense": None}
    assert exp._reach_cells(r) == ("30 (1.50x)", "3.00", "10.0x / 6.7x")
    assert exp._reach_cells(never) == ("-", "-", "-")


def test_link_experiment_refuses_a_target_outside_0_1():
    res = run_module("tools.link_experiment", "--target", "1.5")
    assert res.returncode == 2 and "--target must be in (0, 1]" in res.stderr


def test_link_convnet_has_batchnorm_and_two_compressed_tensors():
    import mindspore as ms
    import ms_optim
    worker = module("tools.link_worker")
    net = worker.model("convnet")
    assert sum(isinstance(c, ms.nn.BatchNorm2d) for _, c in net.cells_and_names()) == 2
    assert sum(p.size for p in net.trainable_params()) == 601802
    opt = ms_optim.DGCMomentum(net.trainable_params(), 0.05, 0.9, rampup_begin_step=0)
    assert opt.compressed_params == ["features.3.weight", "head.0.weight"]
    x = ms.Tensor(np.zeros((3, 64), np.float32))
    assert net(x).shape == (3, 10)


def test_link_eval_after_keeps_and_restores_batchnorm_statistics_too():
    """--eval-after's copies hold every parameter, the convnet's BatchNorm moving statistics
    included: parameters and statistics moved by a training forward come back bit for bit."""
    import mindspore as ms
    worker = module("tools.link_worker")
    net = worker.model("convnet")
    before = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    kept = worker.kept_parameters(net)
    net.set_train(True)
    net(ms.Tensor(np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)))
    for p in net.trainable_params():
        p.set_data(ms.Tensor(np.zeros(p.shape, np.float32)))
    moved = [p.name for p in net.get_parameters() if not np.array_equal(p.asnumpy(),
                                                                        before[p.name])]
    assert any("moving_mean" in name for name in moved), moved  # the forward moved them
    worker.restore_parameters(net, kept)
    for p in net.get_parameters():
        np.testing.assert_array_equal(p.asnumpy(), before[p.name], err_msg=p.name)
    with pytest.raises(ValueError):
        worker.restore_parameters(net, kept[:-1])


@pytest.mark.parametrize("run", ["dgc-head", "dgc-95-head", "dgc-ends", "dgc-99-ends"])
def test_link_recipes_send_the_named_weights_dense(run):
    worker = module("tools.link_worker")
    net = worker.model("small")   # weights 0, 2 and 4; 0 and 2 large enough to compress
    params = net.trainable_params()
    opt = worker.make_optimizer(run, params, 0.05)
    dense = ["0.weight", "4.weight"] if run.endswith("-ends") else ["4.weight"]
    assert [p.name for p, d in zip(params, opt.asked_dense) if d] == dense
    assert opt.compressed_params == [n for n in ("0.weight", "2.weight") if n not in dense]
    assert list(opt.sparsity) == worker.RECIPES[run]["sparsity"]


def test_lab_rates():
    """tools/netlab.py's --rate: tc's units, or unshaped (no tbf, no bucket)."""
    from tools import netlab
    assert netlab.parse_rate("1gbit") == 1e9 and netlab.parse_rate("100mbit") == 1e8
    assert netlab.parse_rate("unshaped") is None and netlab.tbf_burst(None) is None
    assert netlab.tbf_burst(1e8) >= netlab.GSO_MAX
    with pytest.raises(ValueError, match="rate 'fast'"):
        netlab.parse_rate("fast")


@pytest.mark.parametrize("allowed, hosts, want", [
    ([0, 1], 2, [[0], [1]]),
    ([0, 1], 4, [[0], [1], [0], [1]]),
    ([0, 1, 2, 3], 2, [[0, 1], [2, 3]]),
    ([2, 3, 5, 7, 11, 13], 4, [[2], [3, 5], [7], [11, 13]]),
])
def test_lab_split_cores(monkeypatch, allowed, hosts, want):
    """tools/netlab.py's --cores split: each host on its own slice of this process's cores
    (round robin when the hosts outnumber them); shared: every host on all of them."""
    from tools import netlab
    monkeypatch.setattr(netlab.os, "sched_getaffinity", lambda pid: set(allowed))
    split = netlab.Lab(hosts=hosts, cores="split")
    assert [split.host_cores(h) for h in range(hosts)] == want
    shared = netlab.Lab(hosts=hosts)
    assert all(shared.host_cores(h) == allowed for h in range(hosts))
    with pytest.raises(ValueError, match="cores must be one of"):
        netlab.Lab(hosts=2, cores="pinned")
