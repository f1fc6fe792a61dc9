"""One source for every key (issue 21): the schema's fields give each key its description, docs/config.md's config
reference, the JSON Schema's descriptions, validate-config's note next to a problem, and the server's defaults and
request limits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.cli.reference import END, START, config_reference
from grpo_rollout.config import Config
from grpo_rollout.config.fields import section_of, walk
from grpo_rollout.config.json_schema import config_json_schema
from grpo_rollout.config.schema import ModelConfig, SamplingConfig, VllmConfig
from grpo_rollout.generation.server.generate_route import GenerateRequest
from grpo_rollout.generation.server.launch import ServerSettings

REPO = Path(__file__).resolve().parents[2]
KEYS = [key for key, info in walk(Config) if section_of(info.annotation) is None]


def test_every_key_has_a_one_line_description():
    assert len(KEYS) > 70
    missing = [key for key, info in walk(Config) if not (info.description or "").strip()]
    assert missing == []
    assert all("\n" not in info.description for _, info in walk(Config))


def schema_node(schema, key):
    node = schema
    for part in key.split("."):
        if part.endswith("[]"):
            node = node["properties"][part[:-2]]["items"]["anyOf"][0]
        else:
            node = node["properties"][part]
    return node


@pytest.mark.parametrize("key", KEYS)
def test_the_json_schema_gives_every_key_its_description(key):
    info = dict(walk(Config))[key]
    description = schema_node(config_json_schema(), key)["description"]
    assert description.startswith(info.description) and "Default: " in description


def test_the_readme_reference_is_the_generated_one():
    readme = (REPO / "docs" / "config.md").read_text()
    assert START in readme and END in readme, "docs/config.md lost its config reference markers"
    copy = readme[readme.index(START):readme.index(END) + len(END)] + "\n"
    assert copy == config_reference(), ("docs/config.md's config reference is stale: "
                                        "run `grpo-rollout schema --markdown -o docs/config.md`")
    for key in KEYS:  # every key is in it, under its section
        section, _, name = key.rpartition(".")
        assert f"**`{section or 'top level'}`**" in copy and f"| `{name}` |" in copy, key


def test_schema_markdown_prints_the_reference():
    result = CliRunner().invoke(app, ["schema", "--markdown"])
    assert result.exit_code == 0 and result.stdout == config_reference()


def test_schema_markdown_into_a_readme_replaces_only_the_reference(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{START}\nold table\n{END}\nafter\n")
    result = CliRunner().invoke(app, ["schema", "--markdown", "-o", str(readme)])
    assert result.exit_code == 0, result.output
    assert readme.read_text() == "# Title\n\nbefore\n" + config_reference() + "after\n"


def test_a_reference_that_disagrees_with_the_fields_is_caught(monkeypatch):
    monkeypatch.setattr(SamplingConfig.model_fields["temperature"], "description", "Something else")
    assert "| `temperature` | `1.0` | float, > 0 | Something else |" in config_reference()
    readme = (REPO / "docs" / "config.md").read_text()
    assert config_reference() not in readme


def test_validate_config_shows_the_description_next_to_a_problem(project):
    cfg = project.baseline()
    cfg["sampling"]["temperature"] = 0.0
    result = CliRunner().invoke(app, ["validate-config", "--quiet", str(project.write_config(cfg))])
    out = re.sub(r"\s+", " ", re.sub(r"[│┃]", " ", result.output))
    assert result.exit_code == 1
    assert "key: Sampling temperature (the trainer's log-probs use it too)" in out


def test_server_settings_default_to_the_config_defaults():
    settings, vllm = ServerSettings(model="m"), VllmConfig()
    for key in ("host", "port", "max_model_len", "api_key", "kv_cache_space_gib", "gpu_memory_utilization",
                "enforce_eager", "extra_args", "weight_transfer"):
        assert getattr(settings, key) == getattr(vllm, key), key
    assert settings.dtype == ModelConfig().dtype


@pytest.mark.parametrize("key, bad, good", [("top_p", 0.0, 1.0), ("top_p", 1.5, 0.5), ("min_p", -0.1, 0.0),
                                            ("min_p", 1.1, 1.0), ("top_k", -2, -1), ("repetition_penalty", 0.0, 0.5)])
def test_the_generate_route_refuses_what_the_config_refuses(key, bad, good):
    from pydantic import ValidationError

    from grpo_rollout.config import config_from_dict
    from grpo_rollout.config.ranges import check_values

    for value, ok in ((bad, False), (good, True)):
        config, _ = config_from_dict({"sampling": {key: value}})
        problems = []
        check_values(config, problems)
        assert (not any(p.key == f"sampling.{key}" for p in problems)) is ok, (key, value)
        try:
            GenerateRequest(prompts=["x"], **{key: value})
            assert ok, (key, value)
        except ValidationError:
            assert not ok, (key, value)
