"""The code in README.md and docs/*.md runs, and prints what it says it prints.

Conventions for the book's ``python`` code blocks (each file runs top to bottom in one
namespace, like a notebook, in a temporary working folder):

- A block with ``>>>`` prompts is a doctest (ELLIPSIS and NORMALIZE_WHITESPACE on).
- Any other block is executed. A comment ``# -> text`` at the end of a statement, or on the
  comment lines right after it (``#    more`` continues it), is that statement's expected
  output: what it prints, or for an expression the ``repr`` of its value; ``...`` matches
  anything and runs of whitespace are one space, as in doctest.
- ``<!-- skip-test: reason -->`` before a block only compiles it (a GPU, a long training
  run); keep it rare.
- Nothing is hidden: a page's visible blocks, in order, define every name they use, so a
  reader who pastes them into a fresh interpreter gets what the page shows. A
  ``<!-- test-setup`` comment (code that ran unseen before a block) is an error naming the
  file and line.

Each page runs twice. Once in this process, in a namespace of its own that starts empty
(only ``__name__``), which checks the ``# -> text`` outputs and doctests with readable
failures. An empty namespace is not a fresh interpreter, though: modules another test or page
imported, configured or extended (a registered op, an initialised communicator, a changed
default) are still in ``sys.modules``. So each page also runs as a paster would run it: its
blocks concatenated into one script, executed by a new ``python`` process (``-W error``, as
the suite's ``filterwarnings``) in an empty folder, each block on its own line of the page
so that a traceback's line numbers are the page's.

Numbers the docs quote about the test suite are recomputed here too.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import re
import subprocess
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass
class Block:
    line: int  # 1-based line of the block's first code line in its file
    code: str
    skip: str | None = None


HIDDEN_SETUP = re.compile(r"<!--\s*test-setup")


def hidden_setup(page: Path) -> list[str]:
    """``file:line`` of each ``<!-- test-setup`` comment on a page (there must be none)."""
    return [f"{page.relative_to(ROOT)}:{n}"
            for n, line in enumerate(page.read_text().splitlines(), 1)
            if HIDDEN_SETUP.search(line)]


def blocks(page: Path) -> list[Block]:
    """The ``python`` code blocks of a Markdown page, with the marker before each."""
    if found := hidden_setup(page):
        raise ValueError(f"hidden set-up code at {', '.join(found)}: show it in a block")
    out: list[Block] = []
    lines = page.read_text().splitlines()

    def closing(start: int, end: str) -> int:
        return next(j for j in range(start, len(lines)) if lines[j].strip() == end)

    skip, i = None, 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("<!-- skip-test:"):
            skip = line.removeprefix("<!-- skip-test:").removesuffix("-->").strip()
        elif line == "```python":
            j = closing(i + 1, "```")
            code = textwrap.dedent("\n".join(lines[i + 1:j]) + "\n")  # a block in a list item
            out.append(Block(i + 2, code, skip))
            skip, i = None, j
        elif line.startswith("```"):  # another language's block: the marker does not carry over
            j = closing(i + 1, "```")
            skip, i = None, j
        i += 1
    return out


def pasted(page: Path) -> str:
    """The page's blocks that run, as one script: what a reader pastes, in order. Doctest
    blocks contribute their statements without prompts; each block starts on the script line
    of its first line on the page."""
    script: list[str] = []
    for block in blocks(page):
        if block.skip is not None:
            continue
        code = block.code
        if ">>>" in block.code:
            examples = doctest.DocTestParser().get_examples(block.code)
            code = "".join(example.source for example in examples)
        script += [""] * (block.line - 1 - len(script))
        script += code.splitlines()
    return "\n".join(script) + "\n"


def expectations(code: str) -> dict[int, str]:
    """``line of the statement's end -> expected output`` from ``# -> text`` comments."""
    out: dict[int, str] = {}
    comments = [(tok.start[0], tok.string, tok.line.strip() == tok.string.strip())
                for tok in tokenize.generate_tokens(io.StringIO(code).readline)
                if tok.type == tokenize.COMMENT]
    target: int | None = None  # the statement the expectation being read belongs to
    last = 0
    for row, text, alone in comments:
        if text.startswith("# -> "):
            target = row - 1 if alone else row  # alone: the statement on the line above
            if target in out:
                raise ValueError(f"line {row}: two expected outputs for one statement")
            out[target], last = text.removeprefix("# -> "), row
        elif (alone and target is not None and row == last + 1
              and re.match(r"#\s{3,}\S", text)):
            out[target] += "\n" + text[1:].strip()
            last = row
        else:
            target = None
    return out


def run_code(code: str, namespace: dict[str, Any], where: str) -> None:
    """Execute ``code``, checking each statement that carries a ``# -> text`` expectation."""
    expected = expectations(code)
    tree = ast.parse(code)
    checker = doctest.OutputChecker()
    for stmt in tree.body:
        end = stmt.end_lineno or stmt.lineno
        want = expected.pop(end, None)
        module = ast.Module(body=[stmt], type_ignores=[])
        if want is None:
            exec(compile(module, where, "exec"), namespace)
            continue
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            if isinstance(stmt, ast.Expr):  # as the interactive interpreter shows it
                value = eval(compile(ast.Expression(stmt.value), where, "eval"), namespace)
                if value is not None:
                    print(repr(value))
            else:
                exec(compile(module, where, "exec"), namespace)
        got = buffer.getvalue()
        assert checker.check_output(want + "\n", got, FLAGS), (
            f"{where}, line {stmt.lineno}: expected\n  {want}\ngot\n  {got}")
    assert not expected, f"{where}: expectations on no statement's last line: {expected}"


def run_doctest(code: str, namespace: dict[str, Any], where: str) -> None:
    test = doctest.DocTestParser().get_doctest(code, namespace, where, where, 0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out = io.StringIO()
    runner.run(test, out=out.write, clear_globs=False)
    assert runner.failures == 0, out.getvalue()


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_code_blocks_run_and_print_what_they_say(page: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    for block in blocks(page):
        where = f"{page.relative_to(ROOT)}:{block.line}"
        compile(block.code, where, "exec")  # skipped blocks too: at least valid Python
        if block.skip is not None:
            continue
        if ">>>" in block.code:
            run_doctest(block.code, namespace, where)
        else:
            run_code(block.code, namespace, where)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_code_blocks_run_pasted_into_a_fresh_interpreter(page: Path, tmp_path: Path) -> None:
    script = tmp_path / f"{page.name}.py"  # tracebacks: "README.md.py", line <line of the page>
    script.write_text(pasted(page))
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([sys.executable, "-W", "error", str(script)], cwd=work,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"{page.relative_to(ROOT)}, pasted into a fresh interpreter, failed "
        f"(line numbers are the page's):\n{done.stderr[-4000:]}")


def test_no_page_hides_set_up_code() -> None:
    found = [where for page in PAGES for where in hidden_setup(page)]
    assert not found, f"<!-- test-setup --> comments (show the code instead): {found}"


def test_a_hidden_set_up_comment_fails_naming_file_and_line(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n<!-- test-setup\nx = 1\n-->\n```python\nprint(x)\n```\n")
    assert hidden_setup(page) == ["page.md:3"]
    with pytest.raises(ValueError, match=r"page\.md:3"):
        blocks(page)


def test_a_page_is_pasted_with_its_own_line_numbers(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nx = 1\n```\n<!-- skip-test: a GPU -->\n```python\n"
                    "gpu()\n```\n- item\n\n  ```python\n  >>> x + 1\n  2\n  ```\n")
    lines = pasted(page).splitlines()
    assert lines[2] == "x = 1" and lines[11] == "x + 1"
    assert "gpu()" not in lines


def test_skipped_blocks_are_few_and_say_why() -> None:
    all_blocks = [b for page in PAGES for b in blocks(page)]
    skipped = [b for b in all_blocks if b.skip is not None]
    assert all(b.skip for b in skipped)
    assert len(skipped) * 3 < len(all_blocks), "most of the book's code must run in the tests"


def test_expectation_comments_are_read_as_documented() -> None:
    code = ("x = 1\n"
            "print(x)  # -> 1\n"
            "x + 1\n"
            "# -> 2\n"
            "print('a\\nb')\n"
            "# -> a\n"
            "#    b\n"
            "y = 3  # a plain comment\n")
    assert expectations(code) == {2: "1", 3: "2", 5: "a\nb"}
    run_code(code, {}, "example")
    with pytest.raises(AssertionError, match="expected"):
        run_code("print(2)  # -> 3\n", {}, "example")


def test_conformance_counts_quoted_in_writing_a_backend_come_from_the_suite() -> None:
    """The summary line docs/writing-a-backend.md shows for ``numpyref`` is the one the suite
    prints: every case not skipped passes (the conformance session checks that), the skips are
    counted as ``ember.testing.plugin`` counts them."""
    import ember
    from ember._plugins import conformance_skips
    from ember.testing._case import all_cases
    from ember.testing.plugin import _skip_reason

    try:
        dev = ember.device("numpyref")
    except ember.DeviceUnavailableError as exc:  # pragma: no cover - the template not installed
        pytest.skip(str(exc))
    skips = conformance_skips(str(dev))
    counts = {"passed": 0, "declared": 0, "unsupported dtype": 0}
    for case in all_cases():
        why = _skip_reason(case, dev, skips)
        counts["passed" if why is None else why[0]] += 1
    line = (f"ember conformance on numpyref: {counts['passed']} passed, {counts['declared']} "
            f"skipped (declared), {counts['unsupported dtype']} skipped (unsupported dtype)")
    page = (ROOT / "docs" / "writing-a-backend.md").read_text()
    quoted = re.findall(r"^ember conformance on numpyref: .*$", page, re.M)
    assert quoted == [line], f"docs/writing-a-backend.md quotes {quoted}; a run prints {line!r}"


def test_conformance_counts_in_the_book_are_generated_or_dated_gpu_runs() -> None:
    """A count of passed cases typed into a page goes stale with the next case: the pages
    quote none, but the numpyref line (recounted above) and GPU runs that CI cannot repeat,
    each in a paragraph naming the machine (H200 or H100) and the date."""
    stale = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for para in re.split(r"\n\s*\n", page.read_text()):
            if not re.search(r"\b\d[\d,]* (cases )?passed", para):
                continue
            if para.strip().strip("`").strip().startswith("ember conformance on numpyref:"):
                continue
            if re.search(r"\bH[12]00\b", para) and re.search(r"20\d\d-\d\d-\d\d", para):
                continue
            stale.append(f"{page.name}: {para.strip()[:80]}")
    assert not stale, "hand-typed conformance counts: " + "; ".join(stale)
