"""Who may import whom: import-linter's contracts in pyproject.toml (each layer imports only those below it; config/
imports nothing else of grpo-rollout; the orchestrator never imports the trainer) hold, and an upward import breaks
them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def lint_imports(package_root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the ``grpo_rollout`` found in ``package_root``, with the repository's contracts."""
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--config",
                           str(REPO / "pyproject.toml"), "--no-cache"], cwd=package_root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken." in result.stdout


def lint_with_planted_import(tmp_path: Path, module: str,
                             line: str = "from ..trainer import checkpoint") -> subprocess.CompletedProcess:
    """``lint-imports`` on a copy of the package where ``module`` (a path under grpo_rollout/) has the import
    ``line`` (by default: of the trainer)."""
    shutil.copytree(REPO / "grpo_rollout", tmp_path / "grpo_rollout", ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "grpo_rollout" / module
    planted.write_text(planted.read_text() + f"\n{line}  # noqa: E402,F401\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout
    return result


def test_an_upward_import_from_config_breaks_them(tmp_path):
    result = lint_with_planted_import(tmp_path, "config/problems.py")
    # all three: the orchestrator imports config, which would now reach the trainer
    assert "Contracts: 1 kept, 3 broken." in result.stdout
    assert "grpo_rollout.config.problems -> grpo_rollout.trainer.checkpoint" in result.stdout


def test_the_orchestrator_importing_the_trainer_breaks_them(tmp_path):
    """Issue 40.1: the orchestrator hands the trainer its batches; it never reaches into the trainer."""
    result = lint_with_planted_import(tmp_path, "orchestrator/stream.py")
    assert "Contracts: 2 kept, 2 broken." in result.stdout  # the layers, and the orchestrator's own contract
    assert "grpo_rollout.orchestrator.stream -> grpo_rollout.trainer.checkpoint" in result.stdout


def test_the_rollouts_importing_an_integration_breaks_them(tmp_path):
    """Issue 40.2: the integrations adapt the ecosystems' environments to the rollout contract; the built-in rollouts
    never reach into them."""
    result = lint_with_planted_import(tmp_path, "rollouts/single_turn.py",
                                      "from ..integrations.verifiers import chat_harness")
    assert "Contracts: 2 kept, 2 broken." in result.stdout  # the layers, and the rollouts' own contract
    said = " ".join(result.stdout.split())  # lint-imports wraps long lines
    assert "grpo_rollout.rollouts.single_turn -> grpo_rollout.integrations.verifiers.chat_harness" in said


def _layer_modules() -> set:
    """The modules and packages the layers contract names (``a | b`` splits into both)."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [layers] = [c["layers"] for c in contracts if c["type"] == "layers"]
    return {name.strip() for layer in layers for name in layer.split("|")}


def test_every_module_is_in_a_layer():
    """Issue 29: six top-level modules sat outside the layers, so nothing checked who imported them."""
    top = {f"grpo_rollout.{p.stem if p.suffix == '.py' else p.name}" for p in (REPO / "grpo_rollout").iterdir()
           if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").is_file()}
    assert top - _layer_modules() == set(), "add these to a layer in pyproject.toml [tool.importlinter]"
    assert "grpo_rollout.trainer" in top and "grpo_rollout.runs" in top  # what the scan finds


def import_cycles(package_root: Path) -> set:
    """Pairs of modules of the ``grpo_rollout`` under ``package_root`` that import each other, directly or through
    others (imports under ``if TYPE_CHECKING:`` left out: they never run)."""
    import grimp

    sys.path.insert(0, str(package_root))
    saved = {k: v for k, v in sys.modules.items() if k == "grpo_rollout" or k.startswith("grpo_rollout.")}
    for k in saved:
        del sys.modules[k]
    try:
        graph = grimp.build_graph("grpo_rollout", cache_dir=None, exclude_type_checking_imports=True)
    finally:
        sys.path.remove(str(package_root))
        for k in [k for k in sys.modules if k == "grpo_rollout" or k.startswith("grpo_rollout.")]:
            del sys.modules[k]
        sys.modules.update(saved)
    return {tuple(sorted((a, b))) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
            if graph.chain_exists(importer=b, imported=a)}


def test_no_import_cycles(tmp_path):
    """Issue 29: rollouts/episodes and rollouts/multi_turn imported each other (through a re-export at the bottom of
    multi_turn). The same check finds a cycle planted in a copy."""
    assert import_cycles(REPO) == set()
    shutil.copytree(REPO / "grpo_rollout", tmp_path / "grpo_rollout", ignore=shutil.ignore_patterns("__pycache__"))
    conversation = tmp_path / "grpo_rollout" / "rollouts" / "conversation.py"
    conversation.write_text(conversation.read_text() + "\nfrom .episodes import run_episodes  # noqa: E402,F401\n")
    assert ("grpo_rollout.rollouts.conversation", "grpo_rollout.rollouts.episodes") in import_cycles(tmp_path)


def test_the_architecture_page_names_every_module():
    """Issue 29: docs/architecture.md left out 7 trainer modules. Every module's file name is on the page (as often as
    modules share that name; since issue 40 none do)."""
    import collections
    import re

    page = (REPO / "docs" / "architecture.md").read_text()
    names = collections.Counter(p.name for p in (REPO / "grpo_rollout").rglob("*.py")
                                if p.name not in ("__init__.py", "__main__.py"))
    missing = {name: count for name, count in names.items()
               if len(re.findall(rf"(?<![\w]){re.escape(name)}", page)) < count}
    assert missing == {}, "name these modules in docs/architecture.md, 'Every module'"


def test_no_two_modules_share_a_name():
    """Issue 40.4: ``versions``, ``calling``, ``tools``, ``lora`` and ``loading`` were two modules each and
    ``reasoning_gym.py`` three: a name in a traceback or a review did not say which. One file name, one module."""
    import collections

    names = collections.defaultdict(list)
    for path in (REPO / "grpo_rollout").rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            names[path.name].append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


def test_the_client_and_the_tokenizer_are_typed_everywhere():
    """Issue 40.3: ``client: Any`` ×18 and ``tokenizer: Any`` ×26 although ``generation/base.py`` defines the client's
    base class. A parameter or field named ``client`` or ``tokenizer`` says what it is."""
    import ast

    untyped = []
    for path in (REPO / "grpo_rollout").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arg):
                name, annotation = node.arg, node.annotation
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name, annotation = node.target.id, node.annotation
            else:
                continue
            if name in ("client", "tokenizer") and annotation is not None \
                    and ast.unparse(annotation) in ("Any", "Optional[Any]"):
                untyped.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    assert untyped == []
