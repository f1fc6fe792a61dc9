"""Helpers for the config-check tests: a default Config with a few keys changed, and one check run on it."""

from __future__ import annotations

from grpo_rollout.config import Config


def make(**dotted) -> Config:
    """A default Config with ``section__key=value`` changes (``model__lora__r``: nested sections too)."""
    config = Config()
    for name, value in dotted.items():
        *sections, key = name.split("__")
        node = config
        for section in sections:
            node = getattr(node, section)
        setattr(node, key, value)
    return config


def run(check, config):
    problems = []
    check(config, problems)
    return problems
