"""The README and docs/ as a user meets them: their code runs as written, their links resolve,
the README's commands are the ones CI runs, its figures are the benchmarks page's, and the public
docstrings' examples pass as doctests."""
import doctest
import glob
import importlib
import os
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
PAGES = [README, os.path.join(ROOT, "benchmarks", "README.md")] + DOCS


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def blocks(path, lang):
    """The ```lang fenced blocks of a Markdown file, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", read(path), re.S | re.M)


def rel(path):
    return os.path.relpath(path, ROOT)


PYTHON_BLOCKS = [(rel(p), i, code) for p in [README] + DOCS
                 for i, code in enumerate(blocks(p, "python"))]


def public_optimizers():
    """The names of the optimizers ms_optim exports (its ``__all__``'s nn.Optimizer
    subclasses), so that a new optimizer's docs are checked without naming it here."""
    import ms_optim
    from mindspore import nn
    return [n for n in ms_optim.__all__
            if isinstance(getattr(ms_optim, n), type)
            and issubclass(getattr(ms_optim, n), nn.Optimizer)]


OPTIMIZERS = public_optimizers()


# a fresh interpreter importing MindSpore, seconds each: the README's first block is in the
# default tier, every block in the slow one
@pytest.mark.parametrize("page, index, code", [
    pytest.param(p, i, code, id=f"{p}#{i}",
                 marks=() if (p, i) == ("README.md", 0) else pytest.mark.slow)
    for p, i, code in PYTHON_BLOCKS])
def test_python_block_runs_as_written(page, index, code, tmp_path):
    """Each block alone, in a fresh interpreter, from the repository root."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert res.returncode == 0, f"{page} block {index} failed:\n{code}\n{res.stderr[-3000:]}"


# the training scripts that the docs launch with msrun (```python title=train.py blocks)
MSRUN_SCRIPTS = [(rel(p), i, code) for p in DOCS
                 for i, code in enumerate(blocks(p, r"python title=train\.py"))]


def test_the_distributed_page_has_its_msrun_script():
    assert [p for p, _, _ in MSRUN_SCRIPTS] == ["docs/distributed.md"]


@pytest.mark.msrun
@pytest.mark.parametrize("page, index, code", [
    pytest.param(p, i, code, id=f"{p}#{i}") for p, i, code in MSRUN_SCRIPTS])
def test_msrun_script_trains_on_two_workers(page, index, code, tmp_path):
    """The page's script as train.py, launched as the page says, with 2 workers."""
    with open(tmp_path / "train.py", "w") as f:
        f.write(code)
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = subprocess.run([os.path.join(bindir, "msrun"), "--worker_num=2", "--local_worker_num=2",
                          "--master_addr=127.0.0.1", f"--master_port={port}", "--log_dir=logs",
                          "--join=True", "train.py"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    logs = [read(str(tmp_path / "logs" / f"worker_{r}.log")) for r in range(2)]
    assert res.returncode == 0, f"{page} script failed under msrun:\n{logs[0][-3000:]}"
    for log in logs:
        assert "epoch: 2 step:" in log


def test_readme_has_blocks_for_every_optimizer():
    code = "\n".join(c for p, _, c in PYTHON_BLOCKS if p == "README.md")
    for name in OPTIMIZERS + ["capi.Optimizer", "value_and_grad", "ms.Model"]:
        assert name in code, name


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_command():
    first = blocks(README, "bash")[0]
    lines = [line for line in first.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 2, first
    main_job, tests = lines
    assert main_job.endswith("python -m examples.train")
    assert tests.endswith("python -m pytest -q tests --all -n 2 --dist loadfile")
    ci = read(os.path.join(ROOT, ".ci", "run"))
    assert tests in ci, "CI must run the README's test command as written"
    # the main job's module exists where the command says
    assert os.path.exists(os.path.join(ROOT, "examples", "train.py"))


def test_readme_is_a_front_door():
    assert len(read(README).splitlines()) <= 250


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", [rel(p) for p in PAGES])
def test_relative_links_resolve(page):
    path = os.path.join(ROOT, page)
    text = read(path)
    headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.*)$", text, re.M)}
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
            continue
        file_part, _, anchor = target.partition("#")
        if not file_part:
            assert anchor in headings, f"{page}: no heading for #{anchor}"
            continue
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        assert os.path.exists(dest), f"{page}: broken link {target}"
        if anchor and dest.endswith(".md"):
            dest_headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                             for h in re.findall(r"^#+ (.*)$", read(dest), re.M)}
            assert anchor in dest_headings, f"{page}: no heading #{anchor} in {file_part}"


def test_readme_figures_are_the_benchmark_pages():
    """Every number in the README's Figures section appears on the page its line links to."""
    text = read(README)
    section = text[text.index("\n## Figures\n"):]
    section = section[:section.index("\n## ", 1)]
    bullets = [b.replace("\n  ", " ") for b in re.findall(r"^- .*(?:\n  .*)*", section, re.M)]
    assert len(bullets) >= 3
    for line in bullets:
        links = [t for t in LINK.findall(line) if not re.match(r"[a-z]+://", t)]
        assert links, f"figure without a link to where it was measured: {line}"
        page = read(os.path.normpath(os.path.join(ROOT, links[0].partition("#")[0])))
        for number in re.findall(r"\d+(?:[.,]\d+)*", LINK.sub("", line)):
            assert number in page, f"{number!r} ({line}) is not on {links[0]}"


C_PAGE = os.path.join(ROOT, "docs", "capi.md")


def test_c_library_example_builds_with_its_gcc_line_and_runs(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc on PATH")
    from ms_optim import capi
    (code,) = blocks(C_PAGE, "c")
    (build,) = [b for b in blocks(C_PAGE, "bash") if "server.c" in b]
    assert 'gcc -I"$INC" server.c -L"$LIB" -lms_optim -Wl,-rpath,"$LIB" -o server' in build
    (tmp_path / "server.c").write_text(code)
    lib_dir = os.path.dirname(capi.library_path())
    subprocess.run([gcc, "-Wall", "-Werror", f"-I{capi.include_dir()}", "server.c",
                    f"-L{lib_dir}", "-lms_optim", f"-Wl,-rpath,{lib_dir}", "-o", "server"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)
    res = subprocess.run([str(tmp_path / "server")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    row = [float(x) for x in res.stdout.splitlines()[0].split(":")[1].split()]
    np.testing.assert_allclose(row, [-0.001] * 3, rtol=1e-3)


# every public optimizer's module, then the modules of the other documented APIs
DOCTEST_MODULES = [importlib.import_module("ms_optim").__dict__[n].__module__
                   for n in OPTIMIZERS] + [
    "ms_optim.clip", "ms_optim.regularizer", "ms_optim.capi", "ms_optim.dgc.schedule",
    "ms_optim.dgc.wire", "ms_optim.dgc.density"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n in ("ms_optim.dgc", "ms_optim.clip") else n
                                  for n in DOCTEST_MODULES])
def test_docstring_examples_pass(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, name) if t.examples]
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} doctest example(s) failed"


def test_every_optimizer_is_found():
    """The package's optimizers are the test table's (tests/optim_db.py)."""
    from tests.optim_db import OPTIMIZERS as ROWS
    assert sorted(OPTIMIZERS) == sorted(row.cls.__name__ for row in ROWS)


def _documented_signatures():
    """(page, optimizer name, the call written in a ```text block of docs/ that starts with
    the optimizer's name and a parenthesis)."""
    return [(rel(page), name, block) for page in DOCS for block in blocks(page, "text")
            for name in OPTIMIZERS if block.startswith(name + "(")]


def test_every_optimizer_has_its_signature_in_the_docs():
    assert sorted({name for _, name, _ in _documented_signatures()}) == sorted(OPTIMIZERS)


@pytest.mark.parametrize("page, name, block", _documented_signatures(),
                         ids=[f"{p}-{n}" for p, n, _ in _documented_signatures()])
def test_documented_signature_is_the_constructors(page, name, block):
    """A signature block lists the constructor's arguments, in order, with their defaults."""
    import ast
    import inspect
    import ms_optim
    call = ast.parse(block.strip(), mode="eval").body
    written = [(a.id, inspect.Parameter.empty) for a in call.args] + [
        (k.arg, ast.literal_eval(k.value)) for k in call.keywords]
    actual = [(n, p.default) for n, p in
              inspect.signature(getattr(ms_optim, name)).parameters.items()]
    assert written == actual, page


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_public_optimizers_document_mindspore_sections(name):
    import ms_optim
    doc = getattr(ms_optim, name).__doc__
    for section in ("Args:", "Inputs:", "Outputs:", "Raises:", "Supported Platforms:",
                    "Examples:"):
        assert section in doc, f"{name} lacks {section}"
    assert ">>> " in doc


# The repository speaks of the product; the history is CHANGELOG.md's.
HISTORY = re.compile(r"\bissue [0-9]+|\bissue's|\bsessions?\b|"
                     r"(?-i:\bI (have|did|cannot|could|tried|found)\b)|"
                     r"our machines|\b(last|earlier|previous) (machine|host's|session)\b|"
                     r"first release", re.I)
ALLOWED = re.compile(r"scope=.session.|setsid|start_new_session|process group \(session\)|"
                     r"sessions? of (its|their) own")


def test_no_history_in_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    found = []
    for name in files:
        if name == "CHANGELOG.md" or name.endswith((".png", ".so")):
            continue
        path = os.path.join(ROOT, name)
        if not os.path.isfile(path):
            continue
        try:
            lines = read(path).splitlines()
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(lines, 1):
            if name == "tests/docs/test_docs.py":
                break  # the patterns themselves
            if HISTORY.search(ALLOWED.sub("", line)):
                found.append(f"{name}:{i}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
