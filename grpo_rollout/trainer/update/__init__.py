"""The policy update: micro-batches, log-probs, the GRPO losses, advantages, sampler correction."""
