"""The project's size limits on its own code (issue 29): no module under grpo_rollout/ and no test file under tests/
past 300 lines, and no function or method past 60 lines of code, so a file that grows is split by job and a long
function is split into steps."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "grpo_rollout"
TESTS = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 300
MAX_FUNCTION_CODE_LINES = 60


def modules() -> List[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def function_code_lines(node: ast.AST, lines: List[str]) -> int:
    """Lines of code of a ``def`` (or ``async def``): its ``def`` line to its last line, without blank lines,
    comment-only lines and its docstring; nested functions and classes count as lines of the one around them."""
    docstring = set()
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        docstring = set(range(first.lineno, first.end_lineno + 1))
    return sum(1 for n in range(node.lineno, node.end_lineno + 1)
               if n not in docstring and lines[n - 1].strip() and not lines[n - 1].strip().startswith("#"))


def functions(path: Path) -> Iterator[Tuple[ast.AST, int]]:
    """Every function and method in ``path`` (nested ones too), with its lines of code."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, function_code_lines(node, lines)


def test_the_line_count_skips_blank_lines_comments_and_the_docstring(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text('@decorator\ndef f(x):\n    """Doc.\n\n    More doc."""\n    # a comment\n\n    y = x + 1\n'
                      '    return y  # trailing comment\n\n\nasync def g():\n    """One line."""\n    return 1\n')
    assert {node.name: count for node, count in functions(source)} == {"f": 3, "g": 2}


def test_no_module_is_longer_than_300_lines():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:1 has {n} lines" for path in modules()
                 if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert not offenders, f"split these modules by job (at most {MAX_FILE_LINES} lines each):\n" + "\n".join(offenders)


def long_files(paths: List[Path], root: Path) -> List[str]:
    """``"<path relative to root>:1 has N lines"`` for each of ``paths`` longer than MAX_FILE_LINES."""
    return [f"{path.relative_to(root)}:1 has {n} lines" for path in paths
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]


def test_no_test_file_is_longer_than_300_lines(tmp_path):
    (tmp_path / "test_long.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    assert long_files([tmp_path / "test_long.py"], tmp_path) == ["test_long.py:1 has 301 lines"]  # it can fail
    offenders = long_files(sorted(TESTS.rglob("*.py")), TESTS.parent)
    assert not offenders, (f"split these test files by job (at most {MAX_FILE_LINES} lines each; helpers both halves "
                           "use go to tests/helpers.py or a tests/<topic>_helpers.py module):\n" + "\n".join(offenders))


def test_no_function_has_more_than_60_lines_of_code():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} has {count} lines of code"
                 for path in modules() for node, count in functions(path) if count > MAX_FUNCTION_CODE_LINES]
    assert not offenders, (f"split these functions into named steps (at most {MAX_FUNCTION_CODE_LINES} lines of "
                           "code each, blank lines, comments and the docstring not counted):\n" + "\n".join(offenders))
