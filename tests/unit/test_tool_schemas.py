"""Issue 39.4: a tool's whole JSON schema (enums, defaults, nested fields, descriptions) is shown to the model and a
call's arguments are validated against all of it before the tool runs, for Python functions and a TRL environment's
methods (MCP tools: tests/integration/test_tool_schemas_in_rollouts.py). Issue 39.5 (text path): a call the budget
cut off is not scored as malformed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Literal, TypedDict

import pydantic
from helpers import run_tool_calls_sync

from grpo_rollout.rewards.tools import tool_call_validity
from grpo_rollout.integrations.trl.environment_factory import environment_tools
from grpo_rollout.rollouts.tool_parsing import format_tool_call, parse_tool_calls
from grpo_rollout.rollouts.tool_prompt import system_prompt_text
from grpo_rollout.rollouts.tool_running import example_arguments, tool_schema


class Options(pydantic.BaseModel):
    size: int = pydantic.Field(description="how many items")
    fast: bool = False


class OptionsDict(TypedDict):
    size: int


@dataclass
class OptionsData:
    size: int
    fast: bool = False


PICKED: List[tuple] = []


def pick(color: Literal["red", "blue"], opts: Options, limit: int = 5) -> str:
    """Pick things.

    Args:
        color: The colour to pick.
        opts: How to pick.
        limit: At most this many.
    """
    PICKED.append((color, opts, limit))
    return f"picked {color} {opts.size} fast={opts.fast} limit={limit}"


def pick_dict(color: Literal["red", "blue"], opts: OptionsDict, limit: int = 5) -> str:
    """Pick things, options as a TypedDict.

    Args:
        color: The colour to pick.
        opts: How to pick.
        limit: At most this many.
    """
    return f"picked {color} {opts['size']} limit={limit}"


def pick_data(color: Literal["red", "blue"], opts: OptionsData, limit: int = 5) -> str:
    """Pick things, options as a dataclass.

    Args:
        color: The colour to pick.
        opts: How to pick.
        limit: At most this many.
    """
    return f"picked {color} {opts.size} fast={opts.fast} limit={limit}"


def test_the_prompt_shows_enums_defaults_nested_fields_and_descriptions():
    text = system_prompt_text([tool_schema(pick)])
    assert ('- pick(color: "red" | "blue", opts: {size: integer, fast: boolean = false}, limit: integer = 5): '
            'Pick things.') in text  # was: pick(color: string, opts: object, limit: integer)
    assert "  color: The colour to pick.\n  opts: How to pick.\n  opts.size: how many items\n" \
           "  limit: At most this many." in text
    assert "- pick_dict(color: \"red\" | \"blue\", opts: {size: integer}, limit: integer = 5)" in \
        system_prompt_text([tool_schema(pick_dict)])
    assert "opts: {size: integer, fast: boolean = false}" in system_prompt_text([tool_schema(pick_data)])
    # the example call fits the schema (an object with its fields, not "text")
    assert example_arguments(tool_schema(pick)) == {"color": "red", "opts": {"size": 3, "fast": False}, "limit": 5}


def _run(tools, *calls):
    return run_tool_calls_sync(parse_tool_calls("".join(format_tool_call(n, a) for n, a in calls)), tools, 5)


def test_python_tools_are_validated_against_the_whole_schema_and_get_their_types():
    PICKED.clear()
    tools = {"pick": pick, "pick_dict": pick_dict, "pick_data": pick_data}
    results = _run(tools, ("pick", {"color": "green", "opts": {"size": 2}}),
                   ("pick", {"color": "red", "opts": {"size": "2"}}),
                   ("pick", {"color": "red", "opts": {}}),
                   ("pick", {"color": "red", "opts": {"size": 2.0}}),
                   ("pick_dict", {"color": "blue", "opts": {"size": 1}, "limit": 2}),
                   ("pick_data", {"color": "blue", "opts": {"size": 4, "fast": True}}))
    assert [r.error for r in results] == ["bad_arguments", "bad_arguments", "bad_arguments", None, None, None]
    assert results[0].content == ('Error: bad arguments for pick: argument \'color\' must be one of "red", "blue", '
                                  'got "green"')
    assert "argument 'opts.size' must be integer, got \"2\"" in results[1].content
    assert "'size' is a required property" in results[2].content
    # the tool got its pydantic model (3.0 → 3), the TypedDict a dict, the dataclass its instance
    assert [r.content for r in results[3:]] == ["picked red 2 fast=False limit=5", "picked blue 1 limit=2",
                                                "picked blue 4 fast=True limit=5"]
    assert PICKED == [("red", Options(size=2), 5)]  # the rejected calls never ran
    assert tool_call_validity([""], tool_results=[[r.as_dict() for r in results[:4]]]) == [0.25]


class Thermostat:
    """A TRL environment (environment_factory): its public methods are the tools."""

    def reset(self, **kwargs):
        self.degrees = 20

    def adjust(self, direction: Literal["up", "down"], step: int = 1) -> str:
        """Move the set point.

        Args:
            direction: Which way to move it.
            step: Degrees to move.
        """
        self.degrees += step if direction == "up" else -step
        return f"{self.degrees} degrees"


def test_an_environments_method_is_shown_and_checked_with_its_whole_schema():
    env = Thermostat()
    env.reset()
    tools = environment_tools(env)
    assert ('- adjust(direction: "up" | "down", step: integer = 1): Move the set point.\n'
            '  direction: Which way to move it.\n  step: Degrees to move.') in system_prompt_text(
        [tool_schema(fn) for fn in tools.values()])
    results = _run(tools, ("adjust", {"direction": "sideways"}), ("adjust", {"direction": "up", "step": 2}))
    assert [(r.error, r.content) for r in results] == [
        ("bad_arguments", 'Error: bad arguments for adjust: argument \'direction\' must be one of "up", "down", '
                          'got "sideways"'), (None, "22 degrees")]
    assert env.degrees == 22  # "sideways" did not move the thermostat (it used to: -1)
    assert tool_call_validity([""], tool_results=[[results[0].as_dict()]]) == [0.0]  # was 1.0


def test_a_call_the_budget_cut_off_is_not_malformed_when_scoring_text():
    done = format_tool_call("adjust", {"direction": "up"})
    cut = done + '<tool_call>{"name": "adjust", "argu'
    assert tool_call_validity([cut, cut, done + "<tool_call>{"], truncated=[True, False, False],
                              tool_names=["adjust"]) == [1.0, 0.5, 0.5]
    assert tool_call_validity(['<tool_call>{"name": "adj'], truncated=[True]) == [None]  # nothing to judge
    cut_record = {"name": None, "arguments": {}, "error": "truncated"}
    assert tool_call_validity([""], tool_results=[[{"name": "adjust", "error": None}, cut_record]]) == [1.0]
