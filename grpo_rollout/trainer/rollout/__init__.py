"""The rollout stage: a step's prompts (their order, dynamic sampling's refills), calling the rollout and the
rewards, the weight versions the samples came from, rollout statistics."""
