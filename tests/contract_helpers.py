
"""The sizes the rollout-contract tests use: prompts, completions per prompt, and the vocabulary."""


P, N = 2, 3  # prompts, completions per prompt
VOCAB = 50
